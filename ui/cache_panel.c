#include "cache_panel.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/clamp.h"
#include "format.h"

/* A gauge: the filled part in reverse video (a solid bar in colour, monochrome and NO_COLOR alike),
 * the label written across it, centred. */
static void bar(WINDOW *w, const screen *s, int y, int x, int width, double frac, const char *label)
{
    int fill = (int)(frac * width + 0.5), len = (int)strlen(label), at = (width - len) / 2;
    fill = clamp_int(fill, 0, width);
    if (len > width)
        len = 0;
    for (int i = 0; i < width; i++) {
        int on = i < fill,
            attr = on ? screen_attr(s, CP_BAR) | (int)A_REVERSE : screen_attr(s, CP_DIM);
        chtype ch = on ? ' ' : '.';
        if (i >= at && i < at + len)
            ch = (unsigned char)label[i - at];
        else if (!on && s->color)
            ch = ACS_CKBOARD;
        mvwaddch(w, y, x + i, ch | (chtype)attr);
    }
}

/* which turn a cell belongs to */
static const win_turn *turn_at(const cm_conv *c, int pos)
{
    for (int t = 0; t < c->n_turns; t++)
        if (pos >= c->turns[t].start && pos < c->turns[t].start + c->turns[t].len)
            return &c->turns[t];
    return NULL;
}

static void cache_map(WINDOW *w, const screen *s, const cm_conv *c, int y, int rows, int width)
{
    int cells = rows * width, window = c->window ? c->window : c->n_cells;
    if (window <= 0 || cells <= 0)
        return;
    int per = (window + cells - 1) / cells; /* tokens per character cell */
    unsigned char *drop = calloc((size_t)(c->n_cells + 1), 1);
    int left;
    double turns_left;
    if (drop)
        cm_preview(c, drop, &left, &turns_left);
    for (int i = 0; i * per < window && i < cells; i++) {
        int pos = i * per, pair = CP_DIM;
        chtype ch = '.', extra = 0;
        if (pos < c->n_cells) {
            const win_turn *t = turn_at(c, pos);
            int role = t ? t->role : ROLE_USER;
            ch = role == ROLE_USER ? 'u' : role == ROLE_ASSISTANT ? 'a' : 'p';
            pair = role == ROLE_USER ? CP_USER : CP_ASSISTANT;
            if (pos < c->keep || role == ROLE_PREAMBLE)
                pair = CP_KEEP, ch = 'k';
            /* a turn's first cell carries its number as /pin counts it (1-9) */
            int n = 0;
            for (const win_turn *u = c->turns; t && role != ROLE_PREAMBLE && u <= t; u++)
                n += u->role != ROLE_PREAMBLE;
            if (t && pos - t->start < per && n >= 1 && n <= 9)
                ch = (chtype)('0' + n);
            if (t && t->pinned) /* pinned: upper case, its colour */
                pair = CP_PIN, ch = ch >= 'a' && ch <= 'z' ? ch - 32 : ch;
            if (drop && drop[pos]) /* the next eviction: outlined, the writer still readable */
                extra = A_REVERSE | A_UNDERLINE;
        }
        mvwaddch(w, y + i / width, 1 + i % width, ch | (chtype)screen_attr(s, pair) | extra);
    }
    free(drop);
}

/* the conversations, a row each: tokens, bytes, shared blocks, where they live, when last used;
 * returns the next free row */
static int conv_table(const cache_model *m, int conv, WINDOW *w, int y, int h, int iw)
{
    char a[32], ago[32];
    wattron(w, A_BOLD);
    ui_drawf(w, y++, 1, iw, " %4s %6s %9s %4s  %-8s %5s", "conv", "tokens", "bytes", "shrd",
             "state", "used");
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
        if (c->id == conv)
            wattron(w, A_REVERSE);
        ui_drawf(w, y++, 1, iw, "%c%4d %6d %9s %4d  %-8s %5s", c->id == conv ? '>' : ' ', c->id,
                 c->n_cells, fmt_bytes(a, sizeof a, c->bytes_reserved), c->shared_blocks,
                 c->offloaded ? "offload" : "resident", ago);
        if (c->id == conv)
            wattroff(w, A_REVERSE);
    }
    return y;
}

/* the colour of a graph mark: an eviction the reply waited for, one prepared ahead, a grow, a
 * fork, an offload; none: the graph's own */
static int mark_pair(char mark)
{
    switch (mark) {
        case 'E': return CP_WARN;
        case 'P': return CP_MARK_PREP;
        case 'G': return CP_MARK_GROW;
        case 'F': return CP_MARK_FORK;
        case 'O': return CP_MARK_OFFLOAD;
        default: return CP_GRAPH;
    }
}

/* the turns the next eviction drops, as /pin counts them: "turn 2", "turns 1-3", "turns 1, 3" */
static void dropped_turns(const cm_conv *c, const unsigned char *drop, char *buf, size_t n)
{
    int first = 0, last = 0, count = 0, runs = 0, k = 0;
    size_t at = 0;
    char list[64] = "";
    for (int t = 0; t < c->n_turns; t++) {
        const win_turn *tu = &c->turns[t];
        if (tu->role == ROLE_PREAMBLE)
            continue;
        k++;
        int hit = 0;
        for (int p = tu->start; p < tu->start + tu->len && p < c->n_cells && !hit; p++)
            hit = drop[p];
        if (!hit)
            continue;
        runs += !count || k != last + 1;
        if (at < sizeof list)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%d", count ? ", " : "", k);
        first = count ? first : k;
        last = k;
        count++;
    }
    if (!count)
        snprintf(buf, n, "the oldest tokens");
    else if (count == 1)
        snprintf(buf, n, "turn %d", first);
    else if (runs == 1)
        snprintf(buf, n, "turns %d-%d", first, last);
    else
        snprintf(buf, n, "turns %s", list);
}

void cache_panel_draw(cache_model *m, int conv, const screen *s, WINDOW *w)
{
    if (!w)
        return;
    int h, W;
    getmaxyx(w, h, W);
    werase(w);
    box(w, 0, 0);
    int iw = W - 2, y = 1;
    cm_conv *c = cm_conv_get(m, conv);
    char a[32], b[32], d[32];
    wattron(w, A_BOLD);
    ui_drawf(w, 0, 2, iw - 2, " KV cache  conv %d  %s%s %s%s ", conv,
             c && c->offloaded ? "OFFLOADED  " : "", c && c->layout[0] ? c->layout : "",
             c && c->dtype[0] ? c->dtype : "", c && c->approximate ? "  APPROXIMATE (shift)" : "");
    wattroff(w, A_BOLD);
    if (!c || !c->window) { /* a session of an older kvchat, before its first stats */
        ui_drawf(w, y, 1, iw, "empty: send a message to fill it");
        wnoutrefresh(w);
        return;
    }
    /* occupancy */
    ui_drawf(w, y, 1, iw, "%d / %d tok  cap %d  %s / %s", c->n_cells, c->window, c->capacity,
             fmt_bytes(a, sizeof a, c->bytes_used), fmt_bytes(b, sizeof b, c->bytes_reserved));
    y++;
    if (y < h - 1) {
        char label[48];
        snprintf(label, sizeof label, " %.0f%% of the window ", 100.0 * c->n_cells / c->window);
        bar(w, s, y++, 1, iw, (double)c->n_cells / c->window, label);
    }
    char blocks[48] = ""; /* a contiguous pool has none */
    if (m->blocks_total > 0)
        snprintf(blocks, sizeof blocks, "  blocks %d/%d", m->blocks_used, m->blocks_total);
    if (y < h - 1)
        ui_drawf(w, y++, 1, iw, "pool %s / %s%s  this conv %.0f%%",
                 fmt_bytes(a, sizeof a, m->pool_used), fmt_bytes(b, sizeof b, m->pool_bytes),
                 blocks, m->pool_bytes > 0 ? 100 * c->bytes_reserved / m->pool_bytes : 0.0);
    if (y < h - 1)
        ui_drawf(w, y++, 1, iw, "shared %d  frag %s  offloaded %d  grows %d  evicted %d",
                 c->shared_blocks, fmt_bytes(d, sizeof d, c->fragmentation), m->offloaded_convs,
                 c->grows, c->evictions);
    if (s->conv_view) { /* one row per conversation, as htop lists processes */
        y = conv_table(m, conv, w, y, h, iw);
        goto log;
    }
    /* the map: as many rows as fit while leaving room for the rest */
    /* the map and the graph take the spare rows: the map as many as one token a cell needs (up to a
     * third of what is left), the graph a quarter; small panels keep the old few */
    int rest = h - y - 1, map_rows = rest >= 16 ? 6 : rest >= 10 ? 3 : rest >= 5 ? 1 : 0;
    if (rest >= 30) {
        int need = (c->window + iw - 1) / (iw > 0 ? iw : 1);
        map_rows = need < 6 ? 6 : need > rest / 3 ? rest / 3 : need;
    }
    if (map_rows) {
        cache_map(w, s, c, y, map_rows, iw);
        y += map_rows;
        int cells = map_rows * iw, per = (c->window + cells - 1) / cells;
        if (map_rows > 1) { /* the legend, and what one cell holds */
            ui_drawf(w, y++, 1, iw, "cell=%dtok u:you a:gpt-2 k:kept U/A:pinned", per);
            ui_drawf(w, y++, 1, iw, "1-9:turn reverse:next eviction .:free");
        }
        unsigned char *drop = calloc((size_t)c->n_cells + 1, 1);
        int left = 0;
        double turns = 0;
        int n = drop ? cm_preview(c, drop, &left, &turns) : 0;
        char which[64] = "", when[64];
        if (n > 0)
            dropped_turns(c, drop, which, sizeof which);
        free(drop);
        if (turns > 0)
            snprintf(when, sizeof when, "in %d tok (~%.1f turns)", left, turns);
        else
            snprintf(when, sizeof when, "in %d tok", left);
        if (n <= 0)
            ui_drawf(w, y++, 1, iw, "no eviction ahead: nothing evictable yet");
        else if (y < h - 2 && (int)(strlen(when) + strlen(which) + 40) > iw) { /* two lines */
            ui_drawf(w, y++, 1, iw, "next eviction %s", when);
            ui_drawf(w, y++, 1, iw, "  drops %d tok (%s)%s", n, which,
                     c->prepared ? ", prepared" : "");
        } else
            ui_drawf(w, y++, 1, iw, "next eviction %s: drops %d (%s)%s", when, n, which,
                     c->prepared ? ", prepared" : "");
    }
    /* history graph */
    rest = h - y - 1;
    int graph_rows = rest >= 24 ? rest / 3 : rest >= 12 ? 4 : rest >= 8 ? 2 : 0;
    graph_rows = graph_rows > 12 ? 12 : graph_rows;
    if (graph_rows) {
        int heights[512];
        char marks[512];
        int cols = iw - 8 < 512 ? iw - 8 : 512;
        double mx = graph_columns(&c->history, cols, graph_rows, heights, marks);
        static const char *const levels[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
        ui_drawf(w, y, 1, 7, "%5.0f", mx);
        if (graph_rows > 1 &&
            c->n_cells > 0) { /* the same peak in bytes: the axis reads both ways */
            double peak = mx * c->bytes_used / c->n_cells;
            const char *unit = peak >= 1 << 30   ? "G"
                               : peak >= 1 << 20 ? "M"
                                                 : "K"; /* 7 columns: 123.4M */
            ui_drawf(w, y + 1, 1, 7, "%5.1f%s",
                     peak / (peak >= 1 << 30   ? 1 << 30
                             : peak >= 1 << 20 ? 1 << 20
                                               : 1024),
                     unit);
        }
        for (int r = 0; r < graph_rows; r++)
            for (int col = 0; col < cols; col++) {
                int filled = heights[col] * 8 - (graph_rows - 1 - r) * 8; /* eighths of this row */
                filled = clamp_int(filled, 0, 8);
                /* a mark a colour each, and its letter in the bottom row in colour too */
                int pair = mark_pair(marks[col]);
                wattron(w, screen_attr(s, pair));
                if (s->color && marks[col] && r == graph_rows - 1)
                    mvwaddch(w, y + r, 8 + col, (chtype)(unsigned char)marks[col] | A_BOLD);
                else if (s->color)
                    mvwaddstr(w, y + r, 8 + col, levels[filled]);
                else
                    mvwaddch(w, y + r, 8 + col,
                             filled >= 4 ? (marks[col] ? marks[col] : '|') : ' ');
                wattroff(w, screen_attr(s, pair));
            }
        ui_drawf(w, y + graph_rows - 1, 1, 7, "tok");
        y += graph_rows;
        if (y < h - 1) { /* the legend, each letter in its colour, and the history a column holds */
            static const char *const legend[][2] = {{"E", ":evict "},
                                                    {"P", ":prepared "},
                                                    {"G", ":grow "},
                                                    {"F", ":fork "},
                                                    {"O", ":offload "}};
            int x = 1;
            for (int i = 0; i < 5 && x < iw; i++) {
                int attr = screen_attr(s, mark_pair(legend[i][0][0]));
                wattron(w, attr);
                x += ui_drawf(w, y, x, iw + 1 - x, "%s", legend[i][0]);
                wattroff(w, attr);
                x += ui_drawf(w, y, x, iw + 1 - x, "%s", legend[i][1]);
            }
            ui_drawf(w, y++, x, iw + 1 - x, "(%d ev/col)",
                     (c->history.step > 0 ? c->history.step : 1) *
                         (c->history.n > cols ? (c->history.n + cols - 1) / cols : 1));
        }
    }
    /* speed and memory */
    if (y < h - 1)
        ui_drawf(w, y++, 1, iw, "prefill %s  decode %s", fmt_rate(a, sizeof a, c->prefill_tok_s),
                 fmt_rate(b, sizeof b, c->decode_tok_s));
    if (y < h - 1) {
        char ev_ms[48] = ""; /* the turn's evictions, apart from the prefill they made room for */
        if (c->evict_ms > 0)
            snprintf(ev_ms, sizeof ev_ms, "  eviction %s", fmt_ms(a, sizeof a, c->evict_ms));
        ui_drawf(w, y++, 1, iw, "TTFT %s%s  cache hit %.0f%%", fmt_ms(d, sizeof d, c->ttft_ms),
                 ev_ms, c->hit_rate * 100);
    }
    if (y < h - 1 && c->has_fidelity)
        ui_drawf(w, y++, 1, iw, "fidelity: top-1 %s, KL %.2g, agreement %.0f%%",
                 c->fid_top1 ? "same" : "DIFFERS", c->fid_kl, c->fid_rate * 100);
    char total[32], avail[32];
    if (y < h - 1)
        ui_drawf(w, y++, 1, iw, "%s %s (%s free): weights %s  pool %s  work %s",
                 strcmp(m->backend, "cpu") ? m->backend : "host",
                 fmt_bytes(total, sizeof total, m->memory_total),
                 fmt_bytes(avail, sizeof avail, m->memory_free),
                 fmt_bytes(a, sizeof a, m->weights_bytes), fmt_bytes(b, sizeof b, m->pool_bytes),
                 fmt_bytes(d, sizeof d, m->workspace_bytes));
log:;
    /* event log, newest at the bottom: filtered and scrolled back as the view asks */
    int log_rows = h - 1 - y, back = s->log_scroll > 0 ? s->log_scroll : 0;
    cm_log_filter f = (cm_log_filter)s->log_filter;
    static const char *const names[] = {"all", "evictions", "this conv"};
    if (log_rows > 0 && (f != LOG_ALL || back)) {
        char tag[48];
        snprintf(tag, sizeof tag, " log: %s%s ", names[f % 3], back ? ", scrolled back" : "");
        ui_drawf(w, h - 1, 2, iw - 2, "%s", tag);
    }
    for (int i = 0; i < log_rows; i++) {
        const char *line = cm_log_find(m, back + log_rows - 1 - i, f, conv);
        if (!line)
            continue;
        wattron(w, screen_attr(s, CP_DIM));
        ui_draw(w, y + i, 1, line, strlen(line), iw);
        wattroff(w, screen_attr(s, CP_DIM));
    }
    wnoutrefresh(w);
}
