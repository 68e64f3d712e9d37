/* F6's view of the panel: the conversations, a row each, as htop lists processes, and the current
 * one's turns with their share of the replies' attention. */
#include <stdio.h>

#include "fields.h"
#include "format.h"
#include "panel_parts.h"

/* column k of the table: the state left-aligned after two spaces, the numbers right-aligned */
static int column(char *buf, size_t n, int k, int width, const char *text)
{
    return k == 4 ? snprintf(buf, n, "  %-*s", width, text)
                  : snprintf(buf, n, "%s%*s", k ? " " : "", width, text);
}

/* the conversations, a row each, as htop lists processes: tokens, bytes, shared blocks, where they
 * live, when last used; the current one marked. Narrow panels drop the last columns rather than
 * cut them. Returns the next free row. */
int panel_conv_table(WINDOW *w, const cache_model *m, int conv, int y, int h, int iw)
{
    char ago[32];
    /* draft: the tokens its drafter's cache holds (--draft) */
    static const char *const head[] = {"conv", "tokens", "bytes", "shrd", "state", "used", "draft"};
    static const int width[] = {4, 6, 9, 4, 8, 5, 6};
    enum { NCOL = sizeof width / sizeof *width };
    int cols = 0; /* as many as fit whole: the marker, then each with the space before it */
    for (int used = 1 + width[0]; cols < NCOL && used <= iw;)
        used += ++cols < NCOL ? (cols == 4 ? 2 : 1) + width[cols] : 0;
    char line[128];
    int at = snprintf(line, sizeof line, " ");
    for (int k = 0; k < cols; k++)
        at += column(line + at, sizeof line - (size_t)at, k, width[k], head[k]);
    wattron(w, A_BOLD);
    ui_drawf(w, y++, 1, iw, "%s", line);
    wattroff(w, A_BOLD);
    for (int i = 0; i < m->n_convs && y < h - 1; i++) {
        const cm_conv *c = &m->convs[i];
        double since = m->now - c->last_t;
        snprintf(ago, sizeof ago,
                 since < 1      ? "now"
                 : since < 60   ? "%.0fs"
                 : since < 3600 ? "%.0fm"
                                : "%.0fh",
                 since < 60     ? since
                 : since < 3600 ? since / 60
                                : since / 3600);
        char cell[NCOL][32];
        snprintf(cell[0], sizeof cell[0], "%d", c->id);
        snprintf(cell[1], sizeof cell[1], "%d", c->n_cells);
        fmt_bytes(cell[2], sizeof cell[2], c->bytes_reserved);
        snprintf(cell[3], sizeof cell[3], "%d", c->shared_blocks);
        snprintf(cell[4], sizeof cell[4], "%s", c->offloaded ? "offload" : "resident");
        snprintf(cell[5], sizeof cell[5], "%s", ago);
        snprintf(cell[6], sizeof cell[6], c->draft.cached ? "%d" : "-", c->draft.tokens);
        at = snprintf(line, sizeof line, "%c", c->id == conv ? '>' : ' ');
        for (int k = 0; k < cols; k++)
            at += column(line + at, sizeof line - (size_t)at, k, width[k], cell[k]);
        if (c->id == conv)
            wattron(w, A_REVERSE);
        ui_drawf(w, y++, 1, iw, "%s", line);
        if (c->id == conv)
            wattroff(w, A_REVERSE);
    }
    return y;
}

/* the conversation's turns with their share of attention (the last attention event): the mean
 * over heads and layers and the most one head gave; the newest when they do not all fit, since
 * the reading a reply is doing now matters most. A pinned turn's name ends in *. */
int panel_turn_reads(WINDOW *w, const cm_conv *c, int y, int rows, int iw)
{
    if (!c->have_read || rows < 3)
        return y;
    ui_fields f = {0};
    fields_add(&f, "attention per turn:", "where the replies read, a share per turn:");
    y += fields_draw(w, y, 1, iw, 1, &f);
    ui_drawf(w, y++, 1, iw, "turn     tok   mean   max");
    rows -= 2;
    int shown = 1 + c->n_turns < rows ? 1 + c->n_turns : rows, k = 0,
        first = c->n_turns - shown + 1;
    for (int t = 0; t < c->n_turns; t++)
        k += c->turns[t].role != ROLE_PREAMBLE && t < first;
    if (first <= 0 && shown--)
        ui_drawf(w, y++, 1, iw, "%-8s%4d %5.1f%% %5.1f%%", "kept", c->keep, 100 * c->keep_read.mean,
                 100 * c->keep_read.max);
    for (int t = first > 0 ? first : 0; t < c->n_turns && shown-- > 0; t++) {
        const win_turn *tu = &c->turns[t];
        if (tu->role == ROLE_PREAMBLE && tu->start + tu->len <= c->keep) {
            shown++; /* inside the kept prefix: the kept row is its row, not a second one */
            continue;
        }
        char name[16];
        if (tu->role == ROLE_PREAMBLE)
            snprintf(name, sizeof name, "preamble");
        else
            snprintf(name, sizeof name, "%d %s%s", ++k, tu->role == ROLE_USER ? "you" : "gpt-2",
                     tu->pinned ? "*" : "");
        ui_drawf(w, y++, 1, iw, "%-8s%4d %5.1f%% %5.1f%%", name, tu->len, 100 * c->reads[t].mean,
                 100 * c->reads[t].max);
    }
    return y;
}
