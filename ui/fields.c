#include "fields.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "screen.h"
#include "text.h"

void fields_add(ui_fields *fs, const char *brief, const char *fmt, ...)
{
    if (fs->n == (int)(sizeof fs->f / sizeof fs->f[0]))
        return;
    ui_field *f = &fs->f[fs->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->full, sizeof f->full, fmt, ap);
    va_end(ap);
    snprintf(f->brief, sizeof f->brief, "%s", brief ? brief : "");
    f->attr = 0;
}

void fields_attr(ui_fields *fs, int attr)
{
    if (fs->n)
        fs->f[fs->n - 1].attr = attr;
}

static int width_of(const char *s) { return ui_width(s, strlen(s)); }

/* Where field i goes: its form (full or brief) and whether it starts a new row, given the column
 * the row has reached. One rule for drawing and for counting rows. */
static const char *place(const ui_field *f, int col, int gap, int width, int *new_row)
{
    int sep = col ? gap : 0;
    *new_row = 0;
    if (col + sep + width_of(f->full) <= width)
        return f->full;
    if (f->brief[0] && col + sep + width_of(f->brief) <= width)
        return f->brief;
    if (col) { /* on a row of its own, as whole as it can be */
        *new_row = 1;
        return width_of(f->full) <= width || !f->brief[0] ? f->full : f->brief;
    }
    return f->brief[0] ? f->brief : f->full; /* alone and too wide either way: cut */
}

/* w NULL: only counted */
int fields_draw(WINDOW *w, int y, int x, int width, int max_rows, const ui_fields *fs)
{
    int row = 0, col = 0, rows = 0, gap = fs->sep ? fs->sep : 2;
    for (int i = 0; i < fs->n && row < max_rows; i++) {
        int new_row;
        const char *s = place(&fs->f[i], col, gap, width, &new_row);
        if (new_row && ++row >= max_rows)
            break;
        if (new_row)
            col = 0;
        int at = col ? col + gap : 0;
        rows = row + 1;
        if (w) {
            if (fs->f[i].attr)
                wattron(w, fs->f[i].attr);
            col = at + ui_draw(w, y + row, x + at, s, strlen(s), width - at);
            if (fs->f[i].attr)
                wattroff(w, fs->f[i].attr);
        } else {
            int n = width_of(s);
            col = at + (n < width - at ? n : width - at);
        }
    }
    return rows;
}

int fields_rows(int width, const ui_fields *fs)
{
    return fields_draw(NULL, 0, 0, width, 1 << 20, fs);
}
