#include "safe_text.h"

void safe_fwrite(FILE *f, const char *s, size_t n, int raw)
{
    if (raw) {
        fwrite(s, 1, n, f);
        return;
    }
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        unsigned c = u[i];
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
            fputc('^', f);
            fputc(c == 0x7f ? '?' : (int)(c + 0x40), f);
        } else if (c == 0xc2 && i + 1 < n && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f) {
            fprintf(f, "<U+%04X>", u[i + 1]); /* C1 controls, CSI among them */
            i++;
        } else {
            fputc((int)c, f);
        }
    }
}
