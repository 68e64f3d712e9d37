/* The panel's event log, newest at the bottom, filtered and scrolled back as the view asks; a line
 * too long for the panel goes on to the next row, word by word, so nothing in it is cut. */
#include <stdio.h>
#include <string.h>

#include "fields.h"
#include "panel_parts.h"

/* a word the log puts after a figure */
static int is_unit(const char *w)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "ms", "s", "tok", "tok/s"};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (!strcmp(w, units[i]))
            return 1;
    return 0;
}

int panel_log(WINDOW *w, const screen *s, const cache_model *m, int conv, int y, int h, int iw)
{
    int rows = h - 1 - y, back = s->log_scroll > 0 ? s->log_scroll : 0;
    cm_log_filter f = (cm_log_filter)s->log_filter;
    static const char *const names[] = {"all", "evictions", "this conv"};
    if (rows > 0 && (f != LOG_ALL || back)) {
        char tag[48];
        snprintf(tag, sizeof tag, " log: %s%s ", names[f % 3], back ? ", scrolled back" : "");
        ui_drawf(w, h - 1, 2, iw - 2, "%s", tag);
    }
    /* from the bottom up: each line as many rows as its words need */
    int bottom = h - 2;
    for (int i = 0; bottom >= y; i++) {
        const char *line = cm_log_find(m, back + i, f, conv);
        if (!line)
            break;
        ui_fields words = {0};
        char copy[128];
        snprintf(copy, sizeof copy, "%s", line);
        /* a figure and its unit stay on one row ("+64.0 KiB" broke after the number) */
        for (char *tok = strtok(copy, " "), *next; tok; tok = next) {
            next = strtok(NULL, " ");
            if (next && is_unit(next)) {
                fields_add(&words, NULL, "%s %s", tok, next);
                next = strtok(NULL, " ");
            } else {
                fields_add(&words, NULL, "%s", tok);
            }
        }
        words.sep = 1; /* a line's words, not fields */
        int need = fields_rows(iw, &words);
        if (bottom - need + 1 < y)
            break;
        fields_draw(w, bottom - need + 1, 1, iw, need, &words);
        bottom -= need;
    }
    return rows > 0 ? rows : 0;
}
