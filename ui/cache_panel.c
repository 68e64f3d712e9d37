#include "cache_panel.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/clamp.h"
#include "fields.h"
#include "format.h"
#include "panel_parts.h"

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

/* The ramp of attention: a share's step (0-3), drawn as brightness on the writer's letter and
 * colour (screen.h), the same with colour and without. The steps are a turn's share of the
 * reading at 2%, 10% and 25%: on the order of one turn among fifty, ten and four. */
static const double READ_STEPS[] = {0.02, 0.10, 0.25};
static const int READ_ATTRS[] = {A_DIM, A_NORMAL, A_BOLD, A_BOLD | A_UNDERLINE};
static const char *const READ_NAMES[] = {"<2%", "<10%", "<25%", "more"};

static int read_step(double share)
{
    int k = 0;
    while (k < 3 && share >= READ_STEPS[k])
        k++;
    return k;
}

/* drop: what the next eviction drops (cm_preview), in reverse video; NULL: nothing marked. Once
 * the replies' reading is known (an attention event), each turn's cells take its share's
 * brightness. */
static void cache_map(WINDOW *w, const screen *s, const cm_conv *c, int y, int rows, int width,
                      const unsigned char *drop)
{
    int cells = rows * width, window = c->window ? c->window : c->n_cells;
    if (window <= 0 || cells <= 0)
        return;
    int per = (window + cells - 1) / cells; /* tokens per character cell */
    for (int i = 0; i * per < window && i < cells; i++) {
        int pos = i * per, pair = CP_DIM;
        chtype ch = '.';
        int extra = 0;
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
            if (c->have_read) /* brightness alone: the writer's own boldness gives way */
                extra = READ_ATTRS[read_step(pos < c->keep || !t ? c->keep_read.mean
                                                                 : c->reads[t - c->turns].mean)];
            if (drop && drop[pos]) /* the next eviction: reversed, the writer still readable */
                extra |= A_REVERSE;
        }
        int attr = screen_attr(s, pair);
        if (c->have_read && pos < c->n_cells)
            attr &= ~(A_BOLD | A_DIM);
        mvwaddch(w, y + i / width, 1 + i % width, ch | (chtype)(attr | extra));
    }
}

/* how a graph mark is drawn: an eviction (E the reply waited for, P prepared ahead) red, a grow
 * in the graph's green, a fork and an offload by their letter alone; none: the graph's own */
static int mark_attr(const screen *s, char mark)
{
    switch (mark) {
        case 'E':
        case 'P': return screen_attr(s, CP_EVICT);
        case 'G': return screen_attr(s, CP_GRAPH) | A_BOLD;
        case 'F':
        case 'O': return A_BOLD;
        default: return screen_attr(s, CP_GRAPH);
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

/* the title: what is most worth knowing first, and the rest only where it fits whole */
static void title(WINDOW *w, int iw, int conv, const cm_conv *c)
{
    char t[160];
    int n = snprintf(t, sizeof t, " KV cache  conv %d", conv);
    const char *more[] = {c && c->offloaded ? "OFFLOADED" : NULL,
                          c && c->approximate ? "APPROXIMATE (shift)" : NULL,
                          c && c->layout[0] ? c->layout : NULL, c && c->dtype[0] ? c->dtype : NULL};
    for (int i = 0; i < 4; i++)
        if (more[i] && n + 2 + (int)strlen(more[i]) + 1 <= iw - 2)
            n += snprintf(t + n, sizeof t - (size_t)n, "  %s", more[i]);
    snprintf(t + n, sizeof t - (size_t)n, " ");
    wattron(w, A_BOLD);
    ui_drawf(w, 0, 2, iw - 2, "%s", t);
    wattroff(w, A_BOLD);
}

/* tokens, capacity, bytes; the gauge; the pool; the counters */
static int occupancy(WINDOW *w, const screen *s, const cache_model *m, const cm_conv *c, int y,
                     int rows, int iw)
{
    char a[32], b[32], br[64];
    ui_fields f = {0};
    int y0 = y;
    int held = cm_tokens(c);
    fields_add(&f, NULL, "%d / %d tok", held, c->window);
    fields_add(&f, NULL, "cap %d", c->capacity);
    fmt_bytes(a, sizeof a, c->bytes_used);
    fmt_bytes(b, sizeof b, c->bytes_reserved);
    snprintf(br, sizeof br, "%s/%s", a, b);
    fields_add(&f, br, "%s / %s", a, b);
    y += fields_draw(w, y, 1, iw, rows - (y - y0), &f);
    if (y - y0 < rows) {
        char label[48];
        snprintf(label, sizeof label, " %.0f%% of the window ", 100.0 * held / c->window);
        bar(w, s, y++, 1, iw, (double)held / c->window, label);
    }
    f.n = 0;
    fmt_bytes(a, sizeof a, m->pool_used);
    fmt_bytes(b, sizeof b, m->pool_bytes);
    snprintf(br, sizeof br, "pool %s/%s", a, b);
    fields_add(&f, br, "pool %s / %s", a, b);
    if (m->blocks_total > 0) /* a contiguous pool has none */
        fields_add(&f, NULL, "blocks %d/%d", m->blocks_used, m->blocks_total);
    double share = m->pool_bytes > 0 ? 100 * c->bytes_reserved / m->pool_bytes : 0.0;
    snprintf(br, sizeof br, "conv %.0f%%", share);
    fields_add(&f, br, "this conv %.0f%%", share);
    y += fields_draw(w, y, 1, iw, rows - (y - y0), &f);
    f.n = 0;
    fields_add(&f, NULL, "shared %d", c->shared_blocks);
    double frag = c->bytes_reserved > c->bytes_used ? c->bytes_reserved - c->bytes_used : 0;
    fields_add(&f, NULL, "frag %s", fmt_bytes(a, sizeof a, frag));
    fields_add(&f, NULL, "offloaded %d", m->offloaded_convs);
    fields_add(&f, NULL, "grows %d", c->grows);
    fields_add(&f, NULL, "evicted %d", c->evictions);
    return y + fields_draw(w, y, 1, iw, rows - (y - y0), &f);
}

/* --draft: the drafter's cache beside the model's (a gauge of its tokens against the window) and
 * what its drafts came to: acceptance (of drafted, and of tested as llama.cpp counts it), tokens a
 * model pass, and a pass's drafting and checking; on a short panel (compact) one row of the three
 * that matter most, so that the map keeps its rows. Returns the next free row. */
static int drafting(WINDOW *w, const screen *s, const cm_conv *c, int y, int rows, int iw,
                    int compact)
{
    const cm_draft *d = &c->draft;
    char a[32], b[32], label[64];
    int y0 = y;
    if ((!d->cached && !d->rounds) || rows <= 0)
        return y;
    ui_fields f = {0};
    if (compact) {
        if (d->cached)
            fields_add(&f, NULL, "draft cache %d tok", d->tokens);
        if (d->rounds) {
            fields_add(&f, NULL, "accepted %.0f%%",
                       d->drafted ? 100.0 * d->accepted / d->drafted : 0.0);
            fields_add(&f, NULL, "%.2f tok/pass", (double)d->made / d->rounds);
        }
        return y + fields_draw(w, y, 1, iw, 1, &f);
    }
    if (!d->cached)
        goto figures;
    fields_add(&f, NULL, "draft cache %d tok", d->tokens);
    fields_add(&f, NULL, "%s / %s", fmt_bytes(a, sizeof a, d->bytes_used),
               fmt_bytes(b, sizeof b, d->bytes_reserved));
    if (d->shared_blocks)
        fields_add(&f, NULL, "shared %d", d->shared_blocks);
    if (d->offloaded)
        fields_add(&f, NULL, "offloaded");
    y += fields_draw(w, y, 1, iw, rows, &f);
    if (y - y0 < rows && c->window > 0) {
        snprintf(label, sizeof label, " draft: %.0f%% of the window ",
                 100.0 * d->tokens / c->window);
        bar(w, s, y++, 1, iw, (double)d->tokens / c->window, label);
    }
figures:
    if (!d->rounds || y - y0 >= rows)
        return y;
    f.n = 0;
    fields_add(&f, NULL, "accepted %.0f%%", d->drafted ? 100.0 * d->accepted / d->drafted : 0.0);
    fields_add(&f, NULL, "of tested %.0f%%", d->tested ? 100.0 * d->accepted / d->tested : 0.0);
    fields_add(&f, NULL, "%.2f tok/pass", (double)d->made / d->rounds);
    fields_add(&f, NULL, "draft %s", fmt_ms(a, sizeof a, d->draft_ms / d->rounds));
    fields_add(&f, NULL, "check %s", fmt_ms(b, sizeof b, d->verify_ms / d->rounds));
    return y + fields_draw(w, y, 1, iw, rows - (y - y0), &f);
}

/* The map's legend, each key drawn as the map draws it, on up to `rows` rows: the writers and
 * one cell's tokens, then the ramp of attention on a row of its own; on one row, the ramp (the one
 * thing the letters do not say) first and the keys that fit after it. Returns the rows used. */
static int map_legend(WINDOW *w, const screen *s, const cm_conv *c, int y, int rows, int iw,
                      int per)
{
    static const struct {
        const char *brief, *full;
        int pair, attr;
    } keys[] = {
        {"u:you", "u:you", CP_USER, 0},       {"a:gpt-2", "a:gpt-2", CP_ASSISTANT, 0},
        {"k:kept", "k:kept", CP_KEEP, 0},     {"U/A:pinned", "U/A:pinned", CP_PIN, 0},
        {"1-9:turn", "1-9:turn", CP_NONE, 0}, {"next evict", "next eviction", CP_NONE, A_REVERSE},
        {".:free", ".:free", CP_DIM, 0}};
    ui_fields ramp = {.sep = 1}, f = {.sep = 1};
    if (c->have_read) {
        fields_add(&ramp, "read:", "attention read:");
        for (int k = 0; k < 4; k++) {
            fields_add(&ramp, NULL, "%s", READ_NAMES[k]);
            fields_attr(&ramp, READ_ATTRS[k]);
        }
    }
    if (rows == 1)
        f = ramp;
    if (rows >= 1)
        fields_add(&f, NULL, "cell=%dtok", per);
    for (size_t k = 0; rows >= 1 && k < sizeof keys / sizeof keys[0]; k++) {
        fields_add(&f, keys[k].brief, "%s", keys[k].full);
        fields_attr(&f, screen_attr(s, keys[k].pair) | keys[k].attr);
    }
    int used = fields_draw(w, y, 1, iw, rows < 2 ? rows : 2, &f);
    if (rows == 3 && ramp.n)
        used += fields_draw(w, y + used, 1, iw, 1, &ramp);
    return used;
}

/* the cell map, its legend, and when the next eviction comes and what it drops */
static int map_and_forecast(WINDOW *w, const screen *s, const cm_conv *c, int y, int rest, int iw)
{
    /* as many rows as one token a cell needs, up to a share of what is left: a small window's map
     * leaves its rows to the graph and the log */
    int need = (c->window + iw - 1) / (iw > 0 ? iw : 1), y0 = y;
    int most = rest >= 30 ? rest / 3 : rest >= 16 ? 6 : rest >= 10 ? 3 : rest >= 4 ? 1 : 0;
    int map_rows = need < most ? need : most;
    if (map_rows < 1)
        return y;
    unsigned char *drop = calloc((size_t)c->n_cells + 1, 1); /* the map's and the forecast's */
    int left = 0;
    double turns = 0;
    int n = drop ? cm_preview(c, drop, &left, &turns) : 0;
    cache_map(w, s, c, y, map_rows, iw, drop);
    y += map_rows;
    int cells = map_rows * iw, per = (c->window + cells - 1) / cells;
    ui_fields f = {0};
    y += map_legend(w, s, c, y, rest >= 12 ? 3 : rest >= 10 ? 2 : rest >= 4 ? 1 : 0, iw, per);
    char which[64] = "";
    if (n > 0)
        dropped_turns(c, drop, which, sizeof which);
    char read[32] = "";
    if (n > 0 && c->have_read) /* what the model would no longer read */
        snprintf(read, sizeof read, ", %.0f%% of attention", 100 * cm_read_share(c, drop));
    free(drop);
    f = (ui_fields){0};
    /* the room a turn's start keeps for its reply, where it can keep it: none inside a reply */
    int kept = c->replying ? 0
                           : win_reply_kept(c->turns, c->n_turns, c->n_cells, c->keep, c->window, 0,
                                            c->reply_room);
    if (c->refilling) {
        fields_add(&f, NULL, "evicting now:");
        fields_add(&f, NULL, "%d tok re-prefilled", c->refilled);
    } else if (n <= 0) {
        fields_add(&f, NULL, "no eviction ahead:");
        fields_add(&f, NULL, "nothing evictable yet");
    } else {
        char brief[48];
        if (!c->replying && !left) /* the window is full, or a turn makes its room as it starts */
            fields_add(&f, "evicts at the next message", "next eviction at the next message");
        else if (!c->replying && c->reply_room) { /* win_turn_need's guess at the next message */
            snprintf(brief, sizeof brief, "next eviction in %d tok", left);
            fields_add(&f, brief,
                       "next eviction in %d tok (for a message as long as the longest "
                       "here)",
                       left);
        } else
            fields_add(&f, NULL, "next eviction in %d tok", left);
        snprintf(brief, sizeof brief, "(%d for a reply)", kept);
        if (kept) /* fields copy their text: brief is free again after */
            fields_add(&f, brief, "(%d kept for a reply)", kept);
        else if (c->reply_room && !c->replying)
            fields_add(&f, "(replies evict as they grow)",
                       "(no room kept for a reply: it evicts as it grows)");
        if (turns >= 0.05) /* less is this turn: "(~0.0 turns)" said nothing */
            fields_add(&f, NULL, "(~%.1f turns)", turns);
        /* "prepared" stays with what it says of */
        snprintf(brief, sizeof brief, "drops %d%s%s", n, read, c->prepared ? ", prepared" : "");
        fields_add(&f, brief, "drops %d (%s%s)%s", n, which, read, c->prepared ? ", prepared" : "");
    }
    return y + fields_draw(w, y, 1, iw, rest - (y - y0), &f);
}

/* the cache's size over the conversation's life, its marks a colour each, and their legend */
static int history_graph(WINDOW *w, const screen *s, const cm_conv *c, int y, int rest, int iw)
{
    int graph_rows = rest >= 24 ? rest / 3 : rest >= 12 ? 4 : rest >= 8 ? 2 : 0;
    graph_rows = graph_rows > 12 ? 12 : graph_rows;
    if (!graph_rows)
        return y;
    int heights[512];
    char marks[512];
    int cols = iw - 8 < 512 ? iw - 8 : 512;
    double mx = graph_columns(&c->history, cols, graph_rows, heights, marks);
    static const char *const levels[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    ui_drawf(w, y, 1, 7, "%5.0f", mx);
    if (graph_rows > 1 && c->n_cells > 0) { /* the same peak in bytes: the axis reads both ways */
        double peak = mx * c->bytes_used / c->n_cells;
        const char *unit = peak >= 1 << 30 ? "G" : peak >= 1 << 20 ? "M" : "K"; /* 123.4M */
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
            /* a mark's column in its colour (monochrome: bold), its letter in the bottom row
             * where no neighbour has one: a run of marks (every column, in a long chat) leaves
             * the graph's shape whole */
            int attr = mark_attr(s, marks[col]);
            int letter = marks[col] && r == graph_rows - 1 && (col == 0 || !marks[col - 1]) &&
                         (col == cols - 1 || !marks[col + 1]);
            wattron(w, attr);
            if (letter)
                mvwaddch(w, y + r, 8 + col, (chtype)(unsigned char)marks[col] | A_BOLD);
            else if (s->color)
                mvwaddstr(w, y + r, 8 + col, levels[filled]);
            else
                mvwaddch(w, y + r, 8 + col, filled >= 4 ? '|' : ' ');
            wattroff(w, attr);
        }
    ui_drawf(w, y + graph_rows - 1, 1, 7, "tok");
    y += graph_rows;
    static const char *const legend[] = {"E:evict", "P:prepared", "G:grow", "F:fork", "O:offload"};
    ui_fields f = {0};
    for (int i = 0; i < 5; i++) {
        fields_add(&f, NULL, "%s", legend[i]);
        fields_attr(&f, mark_attr(s, legend[i][0]));
    }
    fields_add(&f, NULL, "(%d ev/col)",
               (c->history.step > 0 ? c->history.step : 1) *
                   (c->history.n > cols ? (c->history.n + cols - 1) / cols : 1));
    return y + fields_draw(w, y, 1, iw, rest - graph_rows, &f);
}

/* the last turn's speeds, TTFT, cache hits, fidelity, and memory */
static int speed_and_memory(WINDOW *w, const cache_model *m, const cm_conv *c, int y, int rows,
                            int iw)
{
    char a[48], b[48];
    int y0 = y;
    ui_fields f = {0};
    char hit[16];
    if (!c->prefill_tokens && !c->decode_tokens) { /* no zeros for figures that have none yet */
        fields_add(&f, NULL, "speeds, TTFT and cache hits: after the first message");
    } else {
        fields_add(&f, NULL, "prefill %s",
                   fmt_speed(a, sizeof a, c->prefill_tokens, c->prefill_ms));
        fields_add(&f, NULL, "decode %s", fmt_speed(b, sizeof b, c->decode_tokens, c->decode_ms));
        fields_add(&f, NULL, "TTFT %s", fmt_ms(a, sizeof a, c->ttft_ms));
        if (c->evict_ms > 0) /* the turn's evictions, apart from the prefill they made room for */
            fields_add(&f, NULL, "eviction %s", fmt_ms(b, sizeof b, c->evict_ms));
        snprintf(hit, sizeof hit, "hit %.0f%%", c->hit_rate * 100);
        fields_add(&f, hit, "cache hit %.0f%%", c->hit_rate * 100);
    }
    y += fields_draw(w, y, 1, iw, rows, &f);
    if (c->has_fidelity && y - y0 < rows) {
        f.n = 0;
        fields_add(&f, NULL, "fidelity: top-1 %s", c->fid_top1 ? "same" : "DIFFERS");
        fields_add(&f, NULL, "KL %.2g", c->fid_kl);
        fields_add(&f, NULL, "agreement %.0f%%", c->fid_rate * 100);
        y += fields_draw(w, y, 1, iw, rows - (y - y0), &f);
    }
    char total[32], avail[32];
    f.n = 0;
    fmt_bytes(total, sizeof total, m->memory_total);
    fmt_bytes(avail, sizeof avail, m->memory_free);
    if (m->memory_total > 0) /* known from the model event on, and what is free from the stats */
        fields_add(&f, NULL, "%s %s", strcmp(m->backend, "cpu") ? m->backend : "host", total);
    if (m->memory_free > 0)
        fields_add(&f, NULL, "(%s free)", avail);
    fields_add(&f, NULL, "weights %s", fmt_bytes(a, sizeof a, m->weights_bytes));
    fields_add(&f, NULL, "pool %s", fmt_bytes(a, sizeof a, m->pool_bytes));
    fields_add(&f, NULL, "work %s", fmt_bytes(a, sizeof a, m->workspace_bytes));
    return y + fields_draw(w, y, 1, iw, rows - (y - y0), &f);
}

int cache_panel_draw(cache_model *m, int conv, const screen *s, WINDOW *w)
{
    if (!w)
        return 0;
    int h, W;
    getmaxyx(w, h, W);
    werase(w);
    box(w, 0, 0);
    int iw = W - 2, y = 1;
    cm_conv *c = cm_conv_get(m, conv);
    title(w, iw, conv, c);
    if (!c || !c->window) { /* a session of an older kvchat, before its first stats */
        ui_drawf(w, y, 1, iw, "empty: send a message to fill it");
        wnoutrefresh(w);
        return 0;
    }
    y = occupancy(w, s, m, c, y, h - 1 - y, iw);
    /* at 80x24 the panel has about 12 rows: the drafter's take one, the map the rest */
    y = drafting(w, s, c, y, h - 1 - y, iw, h < 20);
    if (s->conv_view) { /* one row per conversation, as htop lists processes */
        y = panel_conv_table(w, m, conv, y, h, iw);
        y = panel_turn_reads(w, c, y, h - 1 - y, iw);
    } else {
        y = map_and_forecast(w, s, c, y, h - y - 1, iw);
        y = history_graph(w, s, c, y, h - y - 1, iw);
        y = speed_and_memory(w, m, c, y, h - 1 - y, iw);
    }
    int log_rows = panel_log(w, s, m, conv, y, h, iw);
    wnoutrefresh(w);
    return log_rows;
}
