#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Thread_local char err_buf[1024];
static _Thread_local int err_told;

int err_said(void)
{
    err_told = 1;
    return -1;
}

int err_was_said(void) { return err_told; }

int err_set(const char *fmt, ...)
{
    err_told = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int err_wrap(const char *fmt, ...)
{
    char prefix[512], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    snprintf(err_buf, sizeof err_buf, "%s: %s", prefix, old);
    return -1;
}

int err_suffix(const char *fmt, ...)
{
    size_t len = strlen(err_buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf + len, sizeof err_buf - len, fmt, ap);
    va_end(ap);
    return -1;
}

const char *err_msg(void) { return err_buf[0] ? err_buf : "unknown error"; }

/* allocations left before they fail (tests/unit's fault injection); negative: never */
static long alloc_budget = -1;

long err_fail_allocs_after(long n)
{
    return __atomic_exchange_n(&alloc_budget, n, __ATOMIC_SEQ_CST);
}

static int injected_failure(void)
{
    long left = __atomic_load_n(&alloc_budget, __ATOMIC_SEQ_CST);
    while (left >= 0 && !__atomic_compare_exchange_n(&alloc_budget, &left, left - 1, 0,
                                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return left == 0;
}

void *err_malloc(size_t bytes, const char *what)
{
    void *p = injected_failure() ? NULL : malloc(bytes ? bytes : 1);
    if (!p)
        err_set("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *err_alloc_big(size_t bytes, const char *what)
{
    size_t huge = (size_t)2 << 20, align = bytes >= huge ? huge : 128;
    void *p = NULL;
    if (injected_failure() || posix_memalign(&p, align, bytes ? bytes : 1)) {
        err_set("out of memory allocating %zu bytes for %s", bytes, what);
        return NULL;
    }
    /* only the whole huge pages inside get them, so nothing is rounded up; where the kernel
     * refuses the advice, small pages serve as before */
    if (align == huge)
        madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

int err_grow(void *buf, size_t *cap, size_t need, size_t elem, const char *what)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *old, *p;
    memcpy(&old, buf,
           sizeof old); /* buf is an int **, char **, ...: reached without type punning */
    if (injected_failure() || !(p = realloc(old, n * elem)))
        return err_set("out of memory growing %s to %zu items", what, n);
    memcpy(buf, &p, sizeof p);
    *cap = n;
    return 0;
}

int err_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, const char *what)
{
    if (err_grow(buf, cap, *len + n + 1, 1, what))
        return -1;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

void *err_calloc(size_t n, size_t size, const char *what)
{
    void *p = injected_failure() ? NULL : calloc(n ? n : 1, size ? size : 1);
    if (!p)
        err_set("out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}
