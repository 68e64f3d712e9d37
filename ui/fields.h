/* A line of fields laid out by priority, as htop's meters are: each field in order takes its full
 * form where it fits on the line, else its brief one, else it moves to the next line; only a field
 * too wide for a whole line in either form is cut (with an ellipsis). So a number or a label is
 * never cut while a shorter form or a row is left. */
#ifndef KVCHAT_UI_FIELDS_H
#define KVCHAT_UI_FIELDS_H

#include <curses.h>

typedef struct {
    char full[96], brief[48]; /* brief "": none */
    int attr;                 /* drawn with it (0: none) */
} ui_field;

typedef struct {
    ui_field f[24];
    int n;
    int sep; /* columns between fields; 0: two */
} ui_fields;

/* appends a field: its full form (printf), and a brief one (may be NULL) */
void fields_add(ui_fields *fs, const char *brief, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the newest field drawn with attr */
void fields_attr(ui_fields *fs, int attr);
/* Lays fs out on rows y.. of w, columns x..x+width, at most max_rows rows. Returns the rows used
 * (0 with max_rows 0). */
int fields_draw(WINDOW *w, int y, int x, int width, int max_rows, const ui_fields *fs);
/* The rows fields_draw would use at this width (nothing is drawn). */
int fields_rows(int width, const ui_fields *fs);

#endif
