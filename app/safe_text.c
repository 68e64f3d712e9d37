#include "safe_text.h"

#include <string.h>

#include "../kernels/err.h"

/* the length of the well-formed UTF-8 sequence at u (no overlong form, no surrogate), or 0 */
static int utf8_len(const unsigned char *u, size_t n)
{
    int len = u[0] < 0x80                   ? 1
              : u[0] >= 0xc2 && u[0] < 0xe0 ? 2
              : u[0] >= 0xe0 && u[0] < 0xf0 ? 3
              : u[0] >= 0xf0 && u[0] < 0xf5 ? 4
                                            : 0;
    if (!len || (size_t)len > n)
        return 0;
    for (int k = 1; k < len; k++)
        if ((u[k] & 0xc0) != 0x80)
            return 0;
    if ((u[0] == 0xe0 && u[1] < 0xa0) || (u[0] == 0xed && u[1] >= 0xa0) ||
        (u[0] == 0xf0 && u[1] < 0x90) || (u[0] == 0xf4 && u[1] >= 0x90))
        return 0;
    return len;
}

/* The visible form of the character at u[*i] into out (NUL-terminated), *i moved past it: a control
 * character as ^X, a C1 control (CSI among them) as <U+009B>, a byte that is not UTF-8 as <FF>,
 * anything else as it is. */
static void escape_one(const unsigned char *u, size_t n, size_t *i, int keep_newlines, char out[12])
{
    unsigned c = u[*i];
    int len = utf8_len(u + *i, n - *i);
    if ((c < 0x20 && !(keep_newlines && (c == '\n' || c == '\t'))) || c == 0x7f) {
        out[0] = '^';
        out[1] = (char)(c == 0x7f ? '?' : c + 0x40);
        out[2] = 0;
    } else if (!len) {
        snprintf(out, 12, "<%02X>", c);
    } else if (c == 0xc2 && u[*i + 1] <= 0x9f) {
        snprintf(out, 12, "<U+%04X>", u[*i + 1]);
    } else {
        memcpy(out, u + *i, (size_t)len);
        out[len] = 0;
    }
    *i += len ? (size_t)len : 1;
}

const char *latin1_said(char *buf, size_t n, const char *what, int bytes)
{
    snprintf(buf, n, "%s had %d byte%s that %s not UTF-8: read as Latin-1 (0xE9: é)", what, bytes,
             bytes == 1 ? "" : "s", bytes == 1 ? "is" : "are");
    return buf;
}

char *utf8_from_latin1(const char *s, int *fixed)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), o = 0;
    char *out = err_malloc(2 * n + 1, "a message's text"); /* a Latin-1 byte takes two */
    *fixed = 0;
    for (size_t i = 0; out && i < n;) {
        int len = utf8_len(u + i, n - i);
        if (len) {
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len, i += (size_t)len;
            continue;
        }
        out[o++] = (char)(0xc0 | u[i] >> 6);
        out[o++] = (char)(0x80 | (u[i++] & 0x3f));
        ++*fixed;
    }
    if (out)
        out[o] = 0;
    return out;
}

void safe_fwrite(FILE *f, const char *s, size_t n, int raw)
{
    if (raw) {
        fwrite(s, 1, n, f);
        return;
    }
    char out[12];
    for (size_t i = 0; i < n;) {
        escape_one((const unsigned char *)s, n, &i, 1, out);
        fputs(out, f);
    }
}

const char *safe_copy(char *dst, size_t cap, const char *s)
{
    size_t len = 0, n = s ? strlen(s) : 0;
    char out[12];
    dst[0] = 0;
    for (size_t i = 0; i < n;) {
        escape_one((const unsigned char *)s, n, &i, 0, out);
        size_t k = strlen(out);
        if (len + k + 1 > cap)
            break;
        memcpy(dst + len, out, k + 1);
        len += k;
    }
    return dst;
}
