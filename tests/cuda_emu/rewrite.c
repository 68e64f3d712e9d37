/* The emulated device's source rewriter (run by nvcc-emu on every .cu file, before the C++
 * compiler): the three pieces of CUDA C++ that are not C++ become calls into the emulator, and
 * nothing else in the file changes (lines keep their numbers, so errors and __LINE__ point into the
 * original). kernel<<<grid, block, shmem, stream>>>(args)  ->  ::cuemu::launch("kernel", __FILE__,
 * __LINE__,
 *                                                   ::cuemu::config(grid, ...), kernel, args)
 *   __shared__ T a[N], *b;                        ->  auto &a = ::cuemu::shared_var<T[N]>("key");
 * ... extern __shared__ T s[];                      ->  T *s = (T *)::cuemu::dyn_shared();
 *   __global__ ... f(...) __launch_bounds__(n) {  ->  ... { ::cuemu::kernel_entry(__func__, (n));
 * usage: rewrite IN.cu OUT.cpp */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src, *path;
static size_t len;
static char *out;
static size_t out_len, out_cap;
static int line = 1;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: nvcc-emu: ", path, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void emit(const char *s, size_t n)
{
    if (out_len + n + 1 > out_cap) {
        out_cap = (out_len + n + 1) * 2;
        if (!(out = realloc(out, out_cap)))
            die("out of memory");
    }
    memcpy(out + out_len, s, n);
    out_len += n;
    out[out_len] = 0;
}

static void emits(const char *s) { emit(s, strlen(s)); }

static void emitf(const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        die("a rewritten construct is too long");
    emit(buf, (size_t)n);
}

static int ident_char(int c) { return isalnum(c) || c == '_'; }

/* the end of the comment, string, character literal or directive starting at i, or i if none */
static size_t skip_opaque(size_t i)
{
    if (src[i] == '/' && i + 1 < len && src[i + 1] == '/') {
        while (i < len && src[i] != '\n')
            i++;
        return i;
    }
    if (src[i] == '/' && i + 1 < len && src[i + 1] == '*') {
        const char *e = strstr(src + i + 2, "*/");
        return e ? (size_t)(e - src) + 2 : len;
    }
    if (src[i] == '"' || src[i] == '\'') {
        char q = src[i++];
        while (i < len && src[i] != q) {
            if (src[i] == '\\')
                i++;
            i++;
        }
        return i < len ? i + 1 : len;
    }
    return i;
}

/* a directive: from a '#' first on its line to the end of its last continued line */
static size_t skip_directive(size_t i)
{
    while (i < len && src[i] != '\n') {
        if (src[i] == '\\' && i + 1 < len && src[i + 1] == '\n')
            i++;
        i++;
    }
    return i;
}

static int at_line_start(size_t i)
{
    while (i > 0 && (src[i - 1] == ' ' || src[i - 1] == '\t'))
        i--;
    return i == 0 || src[i - 1] == '\n';
}

/* the index of the first of `stops` at bracket depth 0 from i (comments and strings skipped) */
static size_t find_top(size_t i, const char *stops)
{
    int depth = 0;
    while (i < len) {
        size_t j = skip_opaque(i);
        if (j != i) {
            i = j;
            continue;
        }
        char c = src[i];
        if (depth == 0 && strchr(stops, c))
            return i;
        if (c == '(' || c == '[' || c == '{')
            depth++;
        else if (c == ')' || c == ']' || c == '}')
            depth--;
        if (depth < 0)
            return i;
        i++;
    }
    return len;
}

static int count_lines(size_t a, size_t b)
{
    int n = 0;
    for (size_t i = a; i < b; i++)
        n += src[i] == '\n';
    return n;
}

static void emit_newlines(int n)
{
    while (n-- > 0)
        emits("\n");
}

/* text with __align__(n) and alignas(n) removed (the emulator aligns every shared array to 16) */
static void strip_align(char *t)
{
    const char *words[2] = {"__align__", "alignas"};
    for (int w = 0; w < 2; w++) {
        char *p;
        while ((p = strstr(t, words[w]))) {
            char *q = p + strlen(words[w]);
            while (*q == ' ')
                q++;
            if (*q == '(') {
                int d = 0;
                do {
                    d += *q == '(' ? 1 : *q == ')' ? -1 : 0;
                    q++;
                } while (*q && d);
            }
            memmove(p, q, strlen(q) + 1);
        }
    }
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

/* One declarator of a __shared__ declaration: its pointer stars, name and array bounds. base is the
 * declaration's type, taken from the first declarator. */
static void shared_declarator(char *d, char *base, int first, int is_extern, int decl_line)
{
    if (strchr(d, '=') || strchr(d, '('))
        die("a __shared__ declaration with an initialiser or a function type is not supported");
    char *dims = strchr(d, '[');
    char dims_text[512] = "";
    if (dims) {
        snprintf(dims_text, sizeof dims_text, "%s", dims);
        *dims = 0;
    }
    char *head = trim(d), *e = head + strlen(head), *name_end = e;
    while (e > head && ident_char((unsigned char)e[-1]))
        e--;
    if (e == name_end)
        die("cannot find the name in a __shared__ declaration");
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(name_end - e), e);
    *e = 0;
    char stars[64] = "";
    char *t = head + strlen(head);
    while (t > head && (t[-1] == '*' || isspace((unsigned char)t[-1])))
        t--;
    for (char *s = t; *s; s++)
        if (*s == '*')
            strcat(stars, "*");
    if (first) {
        *t = 0;
        snprintf(base, 512, "%s", trim(head));
        if (!*base)
            die("cannot find the type in a __shared__ declaration");
    } else if (*trim(head) && *trim(head) != '*') {
        die("unexpected text in a __shared__ declaration");
    }
    if (is_extern) {
        if (strcmp(trim(dims_text), "[]"))
            die("extern __shared__ %s: expected an array of unknown size", name);
        emitf("%s %s*%s = (%s %s*)::cuemu::dyn_shared();", base, stars, name, base, stars);
    } else {
        emitf("auto &%s = ::cuemu::shared_var<%s %s%s>(__FILE__ \":%d:%s\");", name, base, stars,
              dims_text, decl_line, name);
    }
}

/* at i: the identifier __shared__; returns where the declaration ends (after its ';') */
static size_t rewrite_shared(size_t i)
{
    int is_extern = 0;
    size_t o = out_len;
    while (o > 0 && isspace((unsigned char)out[o - 1]))
        o--;
    if (o >= 6 && !strncmp(out + o - 6, "extern", 6) &&
        (o == 6 || !ident_char((unsigned char)out[o - 7]))) {
        is_extern = 1;
        out_len = o - 6;
    }
    size_t start = i + strlen("__shared__"), end = find_top(start, ";");
    if (end >= len)
        die("a __shared__ declaration without its ';'");
    size_t n = end - start;
    char *text = malloc(n + 1), base[512] = "";
    memcpy(text, src + start, n);
    text[n] = 0;
    for (char *p = text; *p; p++)
        if (*p == '\n')
            *p = ' ';
    strip_align(text);
    int first = 1, depth = 0;
    char *part = text;
    for (char *p = text;; p++) {
        if (*p == '[' || *p == '(')
            depth++;
        else if (*p == ']' || *p == ')')
            depth--;
        if (!*p || (*p == ',' && depth == 0)) {
            int last = !*p;
            *p = 0;
            shared_declarator(part, base, first, is_extern, line);
            first = 0;
            part = p + 1;
            if (last)
                break;
            emits(" ");
        }
    }
    free(text);
    emit_newlines(count_lines(start, end));
    return end + 1;
}

/* where out's postfix expression ending at its end begins (the launched kernel) */
static size_t callee_start(size_t e)
{
    size_t p = e;
    for (;;) {
        int ate_group = 0;
        if (p > 0 && ident_char((unsigned char)out[p - 1])) {
            while (p > 0 && ident_char((unsigned char)out[p - 1]))
                p--;
        } else if (p > 0 && strchr(")]>", out[p - 1])) {
            char close = out[p - 1], open = close == ')' ? '(' : close == ']' ? '[' : '<';
            int d = 0;
            do {
                p--;
                d += out[p] == close ? 1 : out[p] == open ? -1 : 0;
            } while (p > 0 && d);
            if (d)
                die("unbalanced brackets before <<<");
            ate_group = 1;
        } else {
            break;
        }
        if (p >= 2 && !strncmp(out + p - 2, "::", 2))
            p -= 2;
        else if (p >= 2 && !strncmp(out + p - 2, "->", 2))
            p -= 2;
        else if (p >= 1 && out[p - 1] == '.')
            p -= 1;
        else if (!(ate_group && p > 0 &&
                   (ident_char((unsigned char)out[p - 1]) || strchr(")]>", out[p - 1]))))
            break;
    }
    if (p == e)
        die("<<< without a kernel before it");
    return p;
}

/* at i: "<<<"; returns where copying goes on (inside the argument list, after its '(') */
static size_t rewrite_launch(size_t i)
{
    size_t e = out_len;
    while (e > 0 && isspace((unsigned char)out[e - 1]))
        e--;
    size_t s = callee_start(e);
    char callee[1024];
    if (e - s >= sizeof callee)
        die("a launched expression too long");
    memcpy(callee, out + s, e - s);
    callee[e - s] = 0;
    out_len = s;
    size_t cfg = i + 3, cfg_end = cfg;
    for (int depth = 0; cfg_end + 2 < len; cfg_end++) {
        size_t j = skip_opaque(cfg_end);
        if (j != cfg_end) {
            cfg_end = j - 1;
            continue;
        }
        char c = src[cfg_end];
        if (depth == 0 && !strncmp(src + cfg_end, ">>>", 3))
            break;
        depth += c == '(' || c == '[' || c == '{' ? 1 : c == ')' || c == ']' || c == '}' ? -1 : 0;
    }
    if (cfg_end + 2 >= len)
        die("<<< without its >>>");
    size_t a = cfg_end + 3;
    while (a < len && isspace((unsigned char)src[a]))
        a++;
    if (a >= len || src[a] != '(')
        die("expected the kernel's arguments after >>>");
    emits("::cuemu::launch(\"");
    for (const char *c = callee; *c; c++) {
        if (*c == '"' || *c == '\\')
            emits("\\");
        emit(c, 1);
    }
    emits("\", __FILE__, __LINE__, ::cuemu::config(");
    emit(src + cfg, cfg_end - cfg);
    emitf("), %s", callee);
    size_t b = a + 1;
    while (b < len && isspace((unsigned char)src[b]))
        b++;
    if (b < len && src[b] != ')')
        emits(", ");
    line += count_lines(cfg, a + 1);
    emit_newlines(count_lines(cfg_end, a + 1));
    return a + 1;
}

static size_t pending_entry = (size_t)-1; /* where the next kernel's body opens */
static char pending_bounds[256];

/* at a __global__: find its body's '{' and its __launch_bounds__, if it is a definition */
static void note_kernel(size_t i)
{
    size_t open = find_top(i, "{;");
    if (open >= len || src[open] != '{')
        return;
    pending_entry = open;
    strcpy(pending_bounds, "0");
    const char *lb = strstr(src + i, "__launch_bounds__");
    if (lb && (size_t)(lb - src) < open) {
        size_t a = (size_t)(lb - src) + strlen("__launch_bounds__");
        while (a < open && src[a] != '(')
            a++;
        size_t b = find_top(a + 1, ",)");
        if (b >= open || b - a - 1 >= sizeof pending_bounds)
            die("cannot read __launch_bounds__");
        snprintf(pending_bounds, sizeof pending_bounds, "%.*s", (int)(b - a - 1), src + a + 1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: rewrite IN.cu OUT.cpp\n");
        return 2;
    }
    path = argv[1];
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static char buf[1 << 22];
    len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    if (len == sizeof buf - 1)
        die("file too large");
    src = buf;
    emitf("#line 1 \"%s\"\n", path);
    for (size_t i = 0; i < len;) {
        if (i == pending_entry) {
            emitf("{ ::cuemu::kernel_entry(__func__, (%s));", pending_bounds);
            pending_entry = (size_t)-1;
            i++;
            continue;
        }
        size_t j = src[i] == '#' && at_line_start(i) ? skip_directive(i) : skip_opaque(i);
        if (j != i) {
            line += count_lines(i, j);
            emit(src + i, j - i);
            i = j;
            continue;
        }
        if (ident_char((unsigned char)src[i]) &&
            (i == 0 || !ident_char((unsigned char)src[i - 1]))) {
            size_t k = i;
            while (k < len && ident_char((unsigned char)src[k]))
                k++;
            if (k - i == 10 && !strncmp(src + i, "__shared__", 10)) {
                size_t next = rewrite_shared(i);
                line += count_lines(i, next);
                i = next;
                continue;
            }
            if (k - i == 10 && !strncmp(src + i, "__global__", 10))
                note_kernel(k);
            emit(src + i, k - i);
            i = k;
            continue;
        }
        if (!strncmp(src + i, "<<<", 3)) {
            i = rewrite_launch(i);
            continue;
        }
        line += src[i] == '\n';
        emit(src + i, 1);
        i++;
    }
    FILE *o = fopen(argv[2], "wb");
    if (!o || fwrite(out, 1, out_len, o) != out_len || fclose(o)) {
        perror(argv[2]);
        return 1;
    }
    return 0;
}
