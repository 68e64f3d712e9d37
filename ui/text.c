#include "text.h"

#include <string.h>

ui_char ui_next(const char *s, size_t n)
{
    ui_char c = {.bytes = 1};
    unsigned char b = (unsigned char)s[0];
    if (b < 0x20 || b == 0x7f) {
        c.wc = b == 0x7f ? L'?' : (wchar_t)(b + 0x40);
        c.caret = 1;
        c.cols = 2;
        return c;
    }
    mbstate_t st;
    memset(&st, 0, sizeof st);
    wchar_t wc;
    size_t r = mbrtowc(&wc, s, n, &st);
    if (r == (size_t)-1 || r == (size_t)-2 || r == 0) {
        c.wc = 0xfffd;
        c.cols = 1;
        return c;
    }
    c.bytes = (int)r;
    if (wc >= 0x80 && wc < 0xa0) { /* C1 controls, CSI among them */
        c.wc = L'?';
        c.caret = 1;
        c.cols = 2;
        return c;
    }
    int w = wcwidth(wc);
    c.wc = w < 0 ? 0xfffd : wc;
    c.cols = w < 0 ? 1 : w;
    return c;
}

int ui_width(const char *s, size_t n)
{
    int cols = 0;
    for (size_t i = 0; i < n;) {
        ui_char c = ui_next(s + i, n - i);
        cols += c.cols;
        i += (size_t)c.bytes;
    }
    return cols;
}

int ui_wrap(const char *s, size_t n, int width, ui_line *out, int max)
{
    int count = 0;
    if (width < 1)
        width = 1;
    size_t start = 0;
    while (start <= n) {
        size_t i = start, brk = (size_t)-1;
        int cols = 0;
        while (i < n && s[i] != '\n') {
            ui_char c = ui_next(s + i, n - i);
            if (cols + c.cols > width && i > start)
                break;
            if (s[i] == ' ')
                brk = i;
            cols += c.cols;
            i += (size_t)c.bytes;
        }
        size_t end = i, next;
        if (i >= n || s[i] == '\n') {
            next = i + 1;
        } else if (s[i] == ' ') { /* the line is full exactly at a space */
            next = i + 1;
        } else if (brk != (size_t)-1 && brk > start) { /* break at the last space that fits */
            end = brk;
            next = brk + 1;
        } else {
            next = i;
        }
        if (out && count < max)
            out[count] = (ui_line){start, end - start};
        count++;
        if (i >= n)
            break;
        start = next;
    }
    return count;
}
