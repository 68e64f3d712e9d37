/* One error message per thread, set where a failure happens and printed once by the caller at the
 * top (app/main.c). Lives in kernels/ because it is the bottom layer: every layer reports through
 * it. */
#ifndef KVCHAT_ERR_H
#define KVCHAT_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the message and returns -1, so failures read `return err_set("...")`. */
int err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepends context ("loading model: ") to the current message; returns -1. */
int err_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Appends text (" (--force to ...)": what the user can do) to the current message; returns -1. */
int err_suffix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *err_msg(void);
/* A failure already told the user where it happened (a chat that reads on past a message that did
 * not go in): returns -1, and the printer at the top prints nothing more; err_set clears it. */
int err_said(void);
int err_was_said(void);
/* malloc/calloc that set an error naming what was being allocated. */
void *err_malloc(size_t bytes, const char *what);
void *err_calloc(size_t n, size_t size, const char *what);
/* Memory read through every step (weights, the KV pool), freed by free(): aligned to 128 bytes,
 * and past 2 MiB to 2 MiB with transparent huge pages asked for (madvise), so that a stream through
 * it does not miss the TLB at every 4 KiB page. */
void *err_alloc_big(size_t bytes, const char *what);
/* Makes the array *buf (elem-byte items, *cap of them) hold at least `need` items, doubling its
 * capacity; on failure the array is kept and the error names what was growing. buf is the address
 * of the array's pointer. */
int err_grow(void *buf, size_t *cap, size_t need, size_t elem, const char *what);
/* Fault injection for tests: after n more allocations through the helpers above, the next one fails
 * (as if memory ran out), once; n < 0 turns it off (the default). Returns the allocations that were
 * still to go before (negative: the failure was made, or none was asked for). */
long err_fail_allocs_after(long n);
/* Appends n bytes of s to the text *buf (*len bytes, *cap allocated), keeping it NUL-terminated. */
int err_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, const char *what);

#ifdef __cplusplus
}
#endif

#endif
