#include "safe_text.h"

#include <string.h>

/* The visible form of the character at u[*i] into out (NUL-terminated), *i moved past it: a control
 * character as ^X, a C1 control (CSI among them) as <U+009B>, anything else as it is. */
static void escape_one(const unsigned char *u, size_t n, size_t *i, int keep_newlines, char out[12])
{
    unsigned c = u[*i];
    (*i)++;
    if ((c < 0x20 && !(keep_newlines && (c == '\n' || c == '\t'))) || c == 0x7f) {
        out[0] = '^';
        out[1] = (char)(c == 0x7f ? '?' : c + 0x40);
        out[2] = 0;
    } else if (c == 0xc2 && *i < n && u[*i] >= 0x80 && u[*i] <= 0x9f) {
        snprintf(out, 12, "<U+%04X>", u[*i]);
        (*i)++;
    } else {
        out[0] = (char)c;
        out[1] = 0;
    }
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
