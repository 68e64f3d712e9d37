/* Text as the terminal will show it: UTF-8 decoded character by character with its column width
 * (wcwidth), control characters shown as two-column ^X, invalid bytes as U+FFFD. Wrapping and
 * drawing both walk text with ui_next, so what is measured is what is drawn. */
#ifndef KVCHAT_UI_TEXT_H
#define KVCHAT_UI_TEXT_H

#include <stddef.h>
#include <wchar.h>

typedef struct {
    wchar_t wc; /* the character to draw (for a control character, the letter after ^) */
    int caret;  /* drawn as ^wc */
    int cols;   /* columns it takes: 0 (combining), 1, 2 */
    int bytes;  /* bytes it used */
} ui_char;

/* Decodes the character at s[0..n) (n > 0). */
ui_char ui_next(const char *s, size_t n);
/* Columns the whole string takes. */
int ui_width(const char *s, size_t n);

typedef struct {
    size_t start, len; /* bytes of the line, without the newline or the space it broke at */
} ui_line;

/* Breaks s into lines of at most `width` columns, at spaces where possible and at newlines always.
 * Writes at most max lines (out may be NULL to count) and returns how many there are. */
int ui_wrap(const char *s, size_t n, int width, ui_line *out, int max);

#endif
