/* The UI's arithmetic: wrapping with wide and combining characters, layout at any size, the graph's
 * scaling, number formats, and the cache model and the chat pane rebuilt from events. */
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "../../ui/cache_model.h"
#include "../../ui/cache_panel.h"
#include "../../ui/chat_pane.h"
#include "../../ui/format.h"
#include "../../ui/graph.h"
#include "../../ui/layout.h"
#include "../../ui/screen.h"
#include "../../ui/text.h"
#include "check.h"

static void utf8_locale(void)
{
    if (!setlocale(LC_CTYPE, "C.UTF-8"))
        setlocale(LC_CTYPE, "en_US.UTF-8");
}

static void widths(void)
{
    utf8_locale();
    CHECK(ui_width("abc", 3) == 3, "ascii");
    CHECK(ui_width("世界", strlen("世界")) == 4, "CJK is two columns each: %d",
          ui_width("世界", strlen("世界")));
    CHECK(ui_width("e\xcc\x81", 3) == 1, "combining accent takes no column");
    CHECK(ui_width("\x1b[31m", 5) == 2 + 4, "escape shown as ^[ then text: %d",
          ui_width("\x1b[31m", 5));
    CHECK(ui_width("\xff", 1) == 1, "invalid byte is one replacement character");
    ui_char c = ui_next("\x07", 1);
    CHECK(c.caret && c.wc == L'G' && c.cols == 2, "BEL shown as ^G");
    c = ui_next("\xc2\x9b", 2);
    CHECK(c.caret && c.cols == 2, "C1 CSI is not passed through");
}

static void wrapping(void)
{
    utf8_locale();
    ui_line l[16];
    const char *s = "hello world foo";
    int n = ui_wrap(s, strlen(s), 11, l, 16);
    CHECK(n == 2 && l[0].len == 11 && l[1].start == 12 && l[1].len == 3,
          "break at the last space: %d lines", n);
    s = "世界世界世界";
    n = ui_wrap(s, strlen(s), 5, l, 16);
    CHECK(n == 3 && l[0].len == 6,
          "wide characters never split across the edge: %d lines, first %zu bytes", n, l[0].len);
    s = "abcdefghij";
    n = ui_wrap(s, strlen(s), 4, l, 16);
    CHECK(n == 3 && l[2].len == 2, "a long word is cut: %d", n);
    s = "a\n\nb";
    n = ui_wrap(s, strlen(s), 10, l, 16);
    CHECK(n == 3 && l[1].len == 0, "newlines break lines, empty lines kept: %d", n);
    CHECK(ui_wrap("", 0, 10, l, 16) == 1, "empty text is one empty line");
    for (int w = 1; w < 12; w++) { /* no line is ever wider than asked */
        s = "ab 世界 e\xcc\x81 x\ty";
        n = ui_wrap(s, strlen(s), w, l, 16);
        for (int i = 0; i < n && i < 16; i++)
            CHECK(ui_width(s + l[i].start, l[i].len) <= (w < 2 ? 2 : w),
                  "width %d line %d is %d wide", w, i, ui_width(s + l[i].start, l[i].len));
    }
}

static int inside(ui_rect r, int cols, int rows)
{
    return r.y >= 0 && r.x >= 0 && r.y + r.h <= rows && r.x + r.w <= cols;
}

static int overlap(ui_rect a, ui_rect b)
{
    return a.h > 0 && b.h > 0 && a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h &&
           b.y < a.y + a.h;
}

static void layouts(void)
{
    int sizes[][2] = {{80, 24}, {200, 50}, {120, 40}, {109, 30}, {40, 10}, {10, 5}, {300, 100}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ui_layout l;
        int c = sizes[i][0], r = sizes[i][1];
        layout_compute(c, r, PANEL_NORMAL, &l);
        ui_rect all[4] = {l.chat, l.panel, l.input, l.status};
        for (int a = 0; a < 4; a++) {
            CHECK(all[a].h == 0 || inside(all[a], c, r), "%dx%d: part %d outside the screen", c, r,
                  a);
            for (int b = a + 1; b < 4; b++)
                CHECK(!overlap(all[a], all[b]), "%dx%d: parts %d and %d overlap", c, r, a, b);
        }
        CHECK(l.status.y == r - 1 && l.input.y == r - 2, "%dx%d: input and status at the bottom", c,
              r);
        CHECK(l.chat.h >= 1, "%dx%d: no room for the chat", c, r);
    }
    ui_layout l;
    layout_compute(80, 24, PANEL_NORMAL, &l);
    CHECK(!l.side && l.panel.h > 0 && l.panel.w == 80, "80x24 stacks the panel under the chat");
    layout_compute(160, 40, PANEL_NORMAL, &l);
    CHECK(l.side && l.panel.h == 38, "160x40 puts the panel beside the chat");
    /* the panel grows with the screen (it was fixed at 64 columns), widens and hides */
    layout_compute(200, 60, PANEL_NORMAL, &l);
    CHECK(l.panel.w == 80, "200x60: the panel takes 2/5 of the columns, not a fixed 64: %d",
          l.panel.w);
    layout_compute(200, 60, PANEL_WIDE, &l);
    CHECK(l.panel.w == 120 && l.chat.w == 80, "200x60 wide: 3/5 of the columns: %d", l.panel.w);
    layout_compute(200, 60, PANEL_HIDDEN, &l);
    CHECK(l.panel.h == 0 && l.chat.w == 200, "hidden: the chat takes the screen");
    layout_compute(80, 40, PANEL_NORMAL, &l);
    CHECK(l.panel.h == 19, "80x40: the panel below takes half the rows: %d", l.panel.h);
}

static void graph_scaling(void)
{
    graph g = {0};
    int h[8];
    char m[8];
    for (int i = 1; i <= 4; i++)
        graph_push(&g, i * 10, 0);
    graph_mark(&g, 'E');
    double mx = graph_columns(&g, 6, 4, h, m);
    CHECK(mx == 40, "scale %g", mx);
    CHECK(h[0] == 1 && h[1] == 2 && h[2] == 3 && h[3] == 4 && h[4] == 0 && h[5] == 0,
          "heights from the left (nothing shifts as samples come): %d %d %d %d %d %d", h[0], h[1],
          h[2], h[3], h[4], h[5]);
    CHECK(m[3] == 'E' && m[2] == 0, "mark on the newest sample");
    graph_mark(&g, 'G');
    graph_columns(&g, 6, 4, h, m);
    CHECK(m[3] == 'E', "a grow right after an eviction does not hide its mark");
    for (int i = 0; i < 3 * GRAPH_SAMPLES; i++)
        graph_push(&g, i, 0);
    mx = graph_columns(&g, 4, 8, h, m);
    CHECK(mx == 3 * GRAPH_SAMPLES - 1 && h[3] == 8, "the newest value still scales the graph: %g",
          mx);
    CHECK(m[0] == 'E' && h[0] < 8,
          "the whole history: its start (and the eviction there) stays on screen");
    CHECK(g.n <= GRAPH_SAMPLES && g.step >= 2, "samples merged pairwise: %d samples of %d events",
          g.n, g.step);
}

static void formats(void)
{
    char b[32];
    CHECK(!strcmp(fmt_bytes(b, sizeof b, 512), "512 B"), "%s", b);
    CHECK(!strcmp(fmt_bytes(b, sizeof b, 36864), "36.0 KiB"), "%s", b);
    CHECK(!strcmp(fmt_bytes(b, sizeof b, 15518924.8), "14.8 MiB"), "%s", b);
    CHECK(!strcmp(fmt_rate(b, sizeof b, 52.06), "52.1 tok/s"), "%s", b);
    CHECK(!strcmp(fmt_rate(b, sizeof b, 1234.4), "1234 tok/s"), "%s", b);
    CHECK(!strcmp(fmt_ms(b, sizeof b, 0.0213), "0.02 ms"), "%s", b);
    CHECK(!strcmp(fmt_ms(b, sizeof b, 41.2), "41 ms"), "%s", b);
    CHECK(!strcmp(fmt_ms(b, sizeof b, 1900), "1.9 s"), "%s", b);
}

static void apply(cache_model *m, const char *js)
{
    json_error_t e;
    json_t *ev = json_loads(js, 0, &e);
    CHECK(ev != NULL, "bad test JSON: %s", js);
    cm_apply(m, ev);
    json_decref(ev);
}

static void model_from_events(void)
{
    cache_model m;
    cm_init(&m);
    /* preamble 4 + user 3, a 5-token reply, stats; then a second turn */
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3,4,5,6,7],\"cached\":0,\"preamble\":4,"
              "\"ms\":7}");
    for (int i = 0; i < 5; i++)
        apply(&m, "{\"ev\":\"token\",\"conv\":1,\"id\":9,\"ms\":2}");
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"capacity\":16,\"keep\":4,\"evict_min\":"
              "5,\"bytes_used\":1,"
              "\"cache_dtype\":\"f32\",\"layout\":\"paged\"}");
    apply(&m, "{\"ev\":\"turn_end\",\"conv\":1}");
    cm_conv *c = cm_conv_get(&m, 1);
    CHECK(c && c->n_cells == 12 && c->n_turns == 3, "cells %d turns %d", c ? c->n_cells : -1,
          c ? c->n_turns : -1);
    if (!c)
        return;
    CHECK(c->turns[0].role == ROLE_PREAMBLE && c->turns[1].len == 3 &&
              c->turns[2].role == ROLE_ASSISTANT,
          "roles");
    CHECK(c->prefill_tok_s == 1000 && c->decode_tok_s == 500 && c->ttft_ms == 9, "speeds %g %g %g",
          c->prefill_tok_s, c->decode_tok_s, c->ttft_ms);
    unsigned char drop[32];
    int left;
    double turns;
    int n = cm_preview(c, drop, &left, &turns);
    CHECK(n == 8 && drop[4] && drop[11] && !drop[3] && left == 8,
          "preview drops user+reply (8), %d, left %d", n, left);
    /* --evict-at turn makes room at a turn's start for the longest message (3) and a reply (2):
     * the next eviction comes 5 tokens sooner */
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"keep\":4,\"evict_min\":5,"
              "\"reply_room\":2}");
    n = cm_preview(c, drop, &left, &turns);
    CHECK(n == 8 && left == 3, "with a reply's room of 2: drops %d, left %d (want 8, 3)", n, left);
    CHECK(win_reply_kept(c->turns, c->n_turns, c->n_cells, c->keep, c->window, 0, 2) == 2,
          "a reply's room of 2 is kept");
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"keep\":4,\"evict_min\":5,"
              "\"reply_room\":19}");
    cm_preview(c, drop, &left, &turns);
    CHECK(left == 8, "a reply's room the window cannot make: as when full, left %d (want 8)", left);
    CHECK(win_reply_kept(c->turns, c->n_turns, c->n_cells, c->keep, c->window, 0, 19) == 0,
          "a reply's room of 19 in a window of 20 is not said to be kept");
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"capacity\":16,\"keep\":4,\"evict_min\":"
              "5,\"bytes_used\":1,"
              "\"cache_dtype\":\"f32\",\"layout\":\"paged\"}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[8,8],\"cached\":12,\"ms\":1}");
    CHECK(c->avg_turn_tokens == 12 && c->turns_seen == 1, "turn size average %g",
          c->avg_turn_tokens);
    apply(&m, "{\"ev\":\"pin\",\"conv\":1,\"turn\":3,\"pinned\":true}");
    /* drop the first user turn and reply: [4, 8) of 14 */
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":8,\"recomputed\":2,\"ms\":3,"
              "\"mode\":\"exact\","
              "\"ranges\":[[4,8]]}");
    CHECK(c->n_cells == 6 && c->n_turns == 2 && c->turns[1].start == 4 && c->turns[1].pinned,
          "after evict: %d cells %d turns", c->n_cells, c->n_turns);
    /* an eviction re-prefilling: its grows say the tokens the cache holds, fewer than the window's
     * cells until its evict event, and no forecast meanwhile */
    apply(&m, "{\"ev\":\"grow\",\"conv\":1,\"from\":4,\"to\":5,\"bytes\":1,"
              "\"cache\":{\"tokens\":4,\"capacity\":5}}");
    CHECK(cm_tokens(c) == 4 && c->capacity == 5 && cm_preview(c, drop, &left, &turns) == 0,
          "while an eviction re-prefills: %d tokens of capacity %d", cm_tokens(c), c->capacity);
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":0,\"recomputed\":2,"
              "\"ms\":3,\"mode\":\"exact\",\"ranges\":[],\"cache\":{\"tokens\":6,\"capacity\":8}}");
    CHECK(cm_tokens(c) == 6 && c->n_cells == 6, "after it: %d tokens", cm_tokens(c));
    apply(&m, "{\"ev\":\"prepare\",\"conv\":1,\"tokens\":2,\"ms\":4,\"ready\":true}");
    CHECK(c->prepared == 2, "a ready prepare event: the next eviction is prepared");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":0,\"recomputed\":2,\"ms\":1,"
              "\"mode\":\"exact\","
              "\"ranges\":[],\"prepared\":true,\"stall_ms\":1.5}");
    int heights[64];
    char marks[64];
    graph_columns(&c->history, 64, 1, heights, marks);
    char newest = marks[c->history.n - 1];
    CHECK(!c->prepared && c->evictions_prepared == 1 && c->stall_ms == 1.5 && newest == 'P',
          "a prepared eviction: marked P (%c), counted, its stall added", newest ? newest : '0');
    apply(&m, "{\"ev\":\"truncate\",\"conv\":1,\"from\":6,\"to\":5}");
    CHECK(c->n_cells == 5 && c->turns[1].len == 1, "truncate");
    apply(&m, "{\"ev\":\"fork\",\"conv\":2,\"parent\":1,\"tokens\":5,\"shared_blocks\":1}");
    cm_conv *f = cm_conv_get(&m, 2);
    c = cm_conv_get(&m, 1);
    CHECK(f && f->n_cells == 5 && f->n_turns == c->n_turns, "fork copies the parent's window");
    if (f) {
        unsigned char fdrop[32];
        int fleft;
        double fturns;
        int fn = cm_preview(f, fdrop, &fleft, &fturns), pn = cm_preview(c, drop, &left, &turns);
        CHECK(f->capacity == c->capacity && f->bytes_used == c->bytes_used &&
                  !strcmp(f->layout, c->layout) && !strcmp(f->dtype, c->dtype) &&
                  f->prefill_tok_s == c->prefill_tok_s && f->shared_blocks == 1 &&
                  c->shared_blocks == 1,
              "the fork's panel is its parent's (capacity %d/%d, layout '%s', dtype '%s', shared "
              "%d/%d)",
              f->capacity, c->capacity, f->layout, f->dtype, f->shared_blocks, c->shared_blocks);
        CHECK(fn == pn && fleft == left && fturns == turns &&
                  !memcmp(fdrop, drop, (size_t)f->n_cells),
              "the fork's forecast is its parent's (%d vs %d tokens, %d vs %d left)", fn, pn, fleft,
              left);
    }
    CHECK(cm_log_line(&m, 0) && strstr(cm_log_line(&m, 0), "fork"), "log has the fork");
    CHECK(f && f->history.n == c->history.n + 1 && f->history.mark[f->history.n - 1] == 'F',
          "the fork's graph is its parent's history and then the fork");
    int before = f ? f->history.n : 0;
    CHECK(cm_log_line(&m, 1) && strstr(cm_log_line(&m, 1), "truncate"), "log order, newest first");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":1,\"recomputed\":0,\"mode\":"
              "\"shift (approximate)\",\"ranges\":[[4,1]]}");
    CHECK(c->approximate, "shift marks the conversation approximate");
    f = cm_conv_get(&m, 2);
    CHECK(f && f->history.n == before,
          "conversation 1's eviction is not in conversation 2's graph");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"ranges\":[[2,500]]}"); /* out of range: clamped, never
                                                                        negative */
    CHECK(c->n_cells >= 0, "cells went negative");
    apply(&m, "{\"ev\":\"bogus\",\"conv\":1}");
    apply(&m, "{\"conv\":1}");
    cm_free(&m);
}

/* Numbers no kvchat writes (a hostile or damaged file that got past a reader) are clamped by the
 * panel's model, and the panel draws them without writing outside its arrays or allocating
 * gigabytes. */
static void hostile_numbers(void)
{
    static const char *const EVENTS[] = {
        "{\"ev\":\"stats\",\"conv\":1,\"window\":2147483647,\"keep\":2147483647,\"evict_min\":-5}",
        "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3],\"cached\":0,\"preamble\":2000000000}",
        "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3],\"cached\":-2147483648,\"preamble\":-7}",
        "{\"ev\":\"evict\",\"conv\":1,\"ranges\":[[1,2147483647],[9223372036854775807,3]],\"mode\":"
        "\"exact\"}",
        "{\"ev\":\"truncate\",\"conv\":1,\"to\":-9223372036854775807}",
        "{\"ev\":\"stats\",\"conv\":2,\"window\":-1}",
        "{\"ev\":\"prefill\",\"conv\":2,\"ids\":[1],\"cached\":2147483647}",
    };
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *term = out && in ? newterm("xterm", out, in) : NULL;
    CHECK(term, "no terminal to draw on");
    cache_model m;
    cm_init(&m);
    screen scr = {0};
    WINDOW *w = term ? newwin(40, 60, 0, 0) : NULL;
    for (size_t i = 0; i < sizeof EVENTS / sizeof EVENTS[0]; i++) {
        json_t *ev = json_loads(EVENTS[i], 0, NULL);
        CHECK(ev, "event %zu is not JSON", i);
        cm_apply(&m, ev);
        json_decref(ev);
        for (int k = 0; k < m.n_convs; k++) {
            const cm_conv *c = &m.convs[k];
            CHECK(c->window >= 0 && c->window <= CM_MAX_CELLS && c->n_cells >= 0 &&
                      c->n_cells <= CM_MAX_CELLS && c->keep >= 0 && c->keep <= CM_MAX_CELLS,
                  "after event %zu, conv %d: window %d, %d cells, keep %d", i, c->id, c->window,
                  c->n_cells, c->keep);
            if (w)
                cache_panel_draw(&m, c->id, &scr, w);
        }
    }
    cm_free(&m);
    if (term) {
        delwin(w);
        endwin();
        delscreen(term);
    }
    if (out)
        fclose(out);
    if (in)
        fclose(in);
}

/* the messages a session's events leave in a pane, in order: role and text */
static void pane_from_events(void)
{
    const char *evs[] = {
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"hi\"}",
        "{\"ev\":\"token\",\"conv\":1,\"id\":1,\"text\":\" the\"}",
        "{\"ev\":\"token\",\"conv\":1,\"id\":2,\"text\":\"re\"}",
        "{\"ev\":\"evict\",\"conv\":1}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\" there\"}",
        "{\"ev\":\"notice\",\"conv\":1,\"text\":\"said of the old reply\"}",
        "{\"ev\":\"retry\",\"conv\":1}",
        "{\"ev\":\"token\",\"conv\":1,\"id\":3,\"text\":\" yo\"}",
        "{\"ev\":\"notice\",\"conv\":1,\"text\":\"cut\"}",
        "{\"ev\":\"user\",\"conv\":1}",
        /* an edit: the last message and its reply give way to the edited one */
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"first try\"}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"meh\",\"tokens\":1}",
        "{\"ev\":\"edit\",\"conv\":1}",
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"second try\"}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"better\",\"tokens\":1}",
        /* a message that failed before any reply leaves no trace */
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"too big\"}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"\",\"tokens\":0,\"failed\":true}",
    };
    chat_pane p = {0};
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++) {
        json_t *ev = json_loads(evs[i], 0, NULL);
        CHECK(ev != NULL, "event %zu does not parse", i);
        chat_pane_apply(&p, ev, NULL);
        json_decref(ev);
    }
    CHECK(p.n == 5, "%d messages, not 5 (a user event without text adds none)", p.n);
    if (p.n == 5) {
        CHECK(!strcmp(p.msgs[3].text, "second try") && !strcmp(p.msgs[4].text, "better"),
              "the edit: '%s' '%s'", p.msgs[3].text, p.msgs[4].text);
        CHECK(p.msgs[0].role == ROLE_USER && !strcmp(p.msgs[0].text, "hi"), "the message: '%s'",
              p.msgs[0].text);
        CHECK(p.msgs[1].role == ROLE_ASSISTANT && !strcmp(p.msgs[1].text, " yo"),
              "the retried reply: '%s'", p.msgs[1].text);
        CHECK(p.msgs[2].role == ROLE_NOTICE && !strcmp(p.msgs[2].text, "cut"), "the notice: '%s'",
              p.msgs[2].text);
    }
    chat_pane_free(&p);
}

/* row y of w as text (wide characters kept), for the panel tests */
static void row(WINDOW *w, int y, wchar_t *out, int n)
{
    if (mvwinnwstr(w, y, 0, out, n) == ERR)
        out[0] = 0;
}

/* a terminal that writes to /dev/null, for drawing the panel and reading it back */
typedef struct {
    FILE *out, *in;
    SCREEN *term;
} fake_term;

static int term_open(fake_term *t)
{
    setlocale(LC_ALL, "C.UTF-8");
    t->out = fopen("/dev/null", "w");
    t->in = fopen("/dev/null", "r");
    t->term = t->out && t->in ? newterm("xterm", t->out, t->in) : NULL;
    CHECK(t->term, "no terminal to draw on");
    if (!t->term && t->out)
        fclose(t->out);
    if (!t->term && t->in)
        fclose(t->in);
    return t->term ? 0 : -1;
}

static void term_close(fake_term *t)
{
    endwin();
    delscreen(t->term);
    fclose(t->out);
    fclose(t->in);
}

/* the panel drawn from events, read back from the window: what a user sees, in monochrome and
 * colour */
static void panel_reads(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    /* an eviction makes room, then the prefill and the first token: TTFT holds all three */
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":0,\"dropped\":0,\"recomputed\":5,\"ms\":300,"
              "\"ranges\":[]}");
    apply(&m,
          "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3,4,5,6,7,8,9,10],\"cached\":0,\"ms\":10}");
    apply(&m, "{\"ev\":\"token\",\"conv\":1,\"id\":9,\"ms\":2}");
    apply(&m,
          "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"capacity\":16,\"keep\":0,\"evict_min\":5,"
          "\"bytes_used\":1,\"cache_dtype\":\"f16\",\"layout\":\"contiguous\",\"grows\":1,"
          "\"evictions\":1,"
          "\"blocks_used\":0,\"blocks_total\":0}");
    cm_conv *c = cm_conv_get(&m, 1);
    CHECK(c->prefill_tok_s == 1000 && c->ttft_ms == 312 && c->evict_ms == 300,
          "the eviction apart from the prefill: prefill %g tok/s, TTFT %g ms, eviction %g ms",
          c->prefill_tok_s, c->ttft_ms, c->evict_ms);
    /* live, mid-reply: a grow and an eviction show before the turn's stats */
    apply(&m, "{\"ev\":\"grow\",\"conv\":1,\"from\":16,\"to\":32,\"bytes\":1024}");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":0,\"dropped\":2,\"recomputed\":0,\"ms\":4,"
              "\"ranges\":[[0,2]]}");
    CHECK(c->capacity == 32 && c->grows == 1 && c->evictions == 2,
          "live: capacity %d, grows %d, evictions %d", c->capacity, c->grows, c->evictions);
    /* lifetime counters are the events': a stats event's smaller counts never lower them */
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"grows\":0,\"evictions\":0}");
    CHECK(c->grows == 1 && c->evictions == 2, "after a stats event: grows %d, evictions %d",
          c->grows, c->evictions);
    char sum[256];
    json_t *end =
        json_loads("{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"x\",\"tokens\":1}", 0, NULL);
    CHECK(cm_turn_summary(&m, end, sum, sizeof sum) &&
              !strcmp(sum, "prompt 10 tok in 10 ms (1000 tok/s) · reply 1 tok in 2.00 ms · TTFT "
                           "312 ms · evicted 2 tok; 5 re-prefilled in 304 ms"),
          "the turn's statistics, as ollama --verbose prints them: '%s'", sum);
    json_object_set_new(end, "failed", json_true());
    CHECK(!cm_turn_summary(&m, end, sum, sizeof sum), "a failed turn has no statistics");
    json_decref(end);
    apply(&m, "{\"ev\":\"offload\",\"conv\":1,\"bytes\":100,\"ms\":1}");
    wchar_t line[128];
    for (int color = 0; color < 2; color++) {
        screen scr = {.color = color};
        WINDOW *w = newwin(40, 44, 0, 0);
        cache_panel_draw(&m, 1, &scr, w);
        row(w, 0, line, 127);
        CHECK(wcsstr(line, L"OFFLOADED"), "an offloaded conversation says so: %ls", line);
        row(w, 2, line, 127);
        CHECK(wcsstr(line, L"% of the window"), "the gauge carries its number: %ls", line);
        CHECK(mvwinch(w, 2, 1) & A_REVERSE,
              "the gauge's filled part is solid (reverse video) in %s",
              color ? "colour" : "monochrome");
        int found_blocks = 0, found_ttft = 0, found_evict = 0, clipped = 0;
        for (int y = 1; y < 39; y++) {
            row(w, y, line, 127);
            found_blocks |= wcsstr(line, L"blocks 0/0") != NULL;
            found_ttft |= wcsstr(line, L"TTFT 312 ms") != NULL;
            found_evict |= wcsstr(line, L"eviction 304 ms") != NULL; /* 300 before, 4 mid-reply */
            clipped |= wcsstr(line, L"\u2026") != NULL;
        }
        CHECK(!found_blocks, "a contiguous pool shows no blocks 0/0");
        CHECK(found_ttft && found_evict, "TTFT shows the eviction apart");
        CHECK(!clipped, "a field was cut at 44 columns, where it could go on the next row");
        delwin(w);
    }
    /* after /clear nothing can be evicted: no negative forecast */
    apply(&m, "{\"ev\":\"truncate\",\"conv\":1,\"from\":9,\"to\":0}");
    screen scr = {0};
    WINDOW *w = newwin(40, 60, 0, 0);
    cache_panel_draw(&m, 1, &scr, w);
    int negative = 0, none = 0;
    for (int y = 1; y < 39; y++) {
        row(w, y, line, 127);
        negative |= wcsstr(line, L"next eviction -") != NULL;
        none |= wcsstr(line, L"no eviction ahead") != NULL;
    }
    CHECK(!negative && none, "an empty window: 'no eviction ahead', not 'next eviction -0 tok'");
    delwin(w);
    cm_free(&m);
    term_close(&ft);
}

/* before the first message the panel has no figures yet: it says so instead of zeros (issue 46:
 * "(0 B free)", "0 tok in 0.00 ms") */
static void panel_before_first_message(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"new\",\"conv\":1,\"window\":64}");
    screen scr = {0};
    WINDOW *w = newwin(40, 80, 0, 0);
    cache_panel_draw(&m, 1, &scr, w);
    wchar_t line[128];
    int zeros = 0, said = 0;
    for (int y = 1; y < 39; y++) {
        row(w, y, line, 127);
        zeros += wcsstr(line, L"0 B free") || wcsstr(line, L"0 tok in") || wcsstr(line, L"TTFT 0");
        said += wcsstr(line, L"after the first message") != NULL;
    }
    CHECK(!zeros && said, "before the first message: %d lines of zeros, %d saying why not", zeros,
          said);
    delwin(w);
    cm_free(&m);
    term_close(&ft);
}

/* the event log: a run of grows is one line; filters keep evictions or one conversation's lines */
static void log_runs_and_filters(void)
{
    cache_model m;
    cm_init(&m);
    for (int i = 0; i < 7; i++) {
        char ev[160];
        snprintf(ev, sizeof ev,
                 "{\"ev\":\"grow\",\"conv\":1,\"from\":%d,\"to\":%d,\"bytes\":1048576,\"ms\":1}",
                 16 * (i + 1), 16 * (i + 2));
        apply(&m, ev);
    }
    CHECK(cm_log_line(&m, 0) &&
              !strcmp(cm_log_line(&m, 0), "conv 1 grow x7 16->128 tok +7.0 MiB") &&
              !cm_log_line(&m, 1),
          "seven grows in a row are one line: '%s'", cm_log_line(&m, 0) ?: "");
    apply(&m, "{\"ev\":\"grow\",\"conv\":2,\"from\":16,\"to\":32,\"bytes\":1024,\"ms\":1}");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":0,\"dropped\":4,\"recomputed\":2,\"ms\":1,"
              "\"ranges\":[]}");
    apply(&m, "{\"ev\":\"grow\",\"conv\":1,\"from\":128,\"to\":144,\"bytes\":1024,\"ms\":1}");
    CHECK(cm_log_line(&m, 3) && strstr(cm_log_line(&m, 3), "grow x7") &&
              strstr(cm_log_line(&m, 0), "grow 128->144"),
          "a grow after another conversation's line starts a new run");
    const char *e = cm_log_find(&m, 0, LOG_EVICTIONS, 0);
    CHECK(e && strstr(e, "evicted 4 tok; 2 re-prefilled") && !cm_log_find(&m, 1, LOG_EVICTIONS, 0),
          "evictions only: '%s'", e ?: "");
    const char *two = cm_log_find(&m, 0, LOG_CONV, 2);
    CHECK(two && strstr(two, "conv 2 grow") && !cm_log_find(&m, 1, LOG_CONV, 2),
          "conversation 2 only: '%s'", two ?: "");
    cm_free(&m);
}

/* F6's view: a row per conversation, the current one marked, where each lives and when it was used
 */
static void conversations_view(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"t\":1,\"ids\":[1,2,3],\"cached\":0,\"ms\":1}");
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"t\":2,\"window\":64,\"capacity\":16,\"bytes_"
              "reserved\":2048,"
              "\"shared_blocks\":1}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":2,\"t\":3,\"ids\":[1,2,3,4,5],\"cached\":0,\"ms\":1}");
    apply(&m, "{\"ev\":\"stats\",\"conv\":2,\"t\":4,\"window\":64,\"capacity\":16,\"bytes_"
              "reserved\":4096}");
    apply(&m, "{\"ev\":\"offload\",\"conv\":1,\"t\":95,\"bytes\":2048,\"ms\":1}");
    apply(&m, "{\"ev\":\"notice\",\"conv\":2,\"t\":184,\"text\":\"x\"}");
    screen scr = {.conv_view = 1};
    WINDOW *w = newwin(30, 70, 0, 0);
    cache_panel_draw(&m, 2, &scr, w);
    wchar_t line[128];
    int one = 0, two = 0;
    for (int y = 1; y < 29; y++) {
        row(w, y, line, 127);
        one |= wcsstr(line, L"    1      3   2.0 KiB    1  offload     3m") != NULL;
        two |= wcsstr(line, L">   2      5   4.0 KiB    0  resident   now") != NULL;
    }
    CHECK(one && two, "a row per conversation: conv 1 offloaded, used 182 s before (its idle "
                      "offload is no use); conv 2 current, resident, now");

    delwin(w);
    cm_free(&m);
    term_close(&ft);
}

/* a window of 20 holding a preamble of 4 (the kept prefix), a message of 3 and a reply of 5 */
static void small_window(cache_model *m)
{
    cm_init(m);
    apply(m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3,4,5,6,7],\"cached\":0,\"preamble\":4,"
             "\"ms\":7}");
    for (int i = 0; i < 5; i++)
        apply(m, "{\"ev\":\"token\",\"conv\":1,\"id\":9,\"ms\":2}");
    apply(m,
          "{\"ev\":\"stats\",\"conv\":1,\"window\":20,\"capacity\":16,\"keep\":4,\"evict_min\":5}");
    apply(m, "{\"ev\":\"turn_end\",\"conv\":1}");
}

/* The graph's bottom row, read back: a mark's letter where it stands alone, the bar where its
 * neighbours are marked too, so a graph marked in every column (a long chat's grows) keeps its
 * shape (issue 46 saw a row of letters). Returns the letters, and in *bars the bar glyphs. */
static int graph_letters(int every, int *bars)
{
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"new\",\"conv\":1,\"window\":1024}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1],\"cached\":0,\"ms\":1}");
    for (int i = 0; i < 400; i++) {
        apply(&m, "{\"ev\":\"token\",\"conv\":1,\"id\":9,\"ms\":1}");
        if (i % every == every - 1)
            apply(&m, "{\"ev\":\"grow\",\"conv\":1,\"from\":1,\"to\":2,\"bytes\":1}");
    }
    screen scr = {.color = 1};
    WINDOW *w = newwin(40, 60, 0, 0);
    cache_panel_draw(&m, 1, &scr, w);
    wchar_t line[128];
    int letters = -1;
    *bars = 0;
    for (int y = 1; y < 39 && letters < 0; y++) {
        row(w, y, line, 127);
        if (wcsncmp(line + 1, L"tok", 3))
            continue;
        letters = 0;
        for (int x = 8; x < 58; x++) {
            letters += line[x] == L'G';
            *bars += line[x] >= 0x2581 && line[x] <= 0x2588;
        }
    }
    delwin(w);
    cm_free(&m);
    return letters;
}

static void graph_marks_keep_shape(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    int bars, letters = graph_letters(1, &bars);
    CHECK(letters == 0 && bars > 40, "marked in every column: %d letters, %d bars", letters, bars);
    letters = graph_letters(200, &bars);
    CHECK(letters == 2, "two marks far apart: %d letters (want 2)", letters);
    term_close(&ft);
}

/* the map read back: who wrote each cell, turns numbered as /pin counts them, a pinned turn in
 * capitals, the next eviction outlined (reverse video) without hiding its writer, and a legend with
 * the scale */
static void map_reads(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    small_window(&m);
    apply(&m, "{\"ev\":\"pin\",\"conv\":1,\"turn\":1,\"pinned\":true}");
    screen scr = {0};
    WINDOW *w = newwin(40, 44, 0, 0);
    cache_panel_draw(&m, 1, &scr, w);
    wchar_t line[128];
    int map = -1, legend = 0;
    for (int y = 1; y < 39; y++) {
        row(w, y, line, 127);
        if (map < 0 && !wcsncmp(line + 1, L"kkkk1UU2aaaa", 12))
            map = y;
        legend |= wcsstr(line, L"cell=1tok u:you a:gpt-2 k:kept U/A:pinned") != NULL;
    }
    CHECK(map > 0, "the map reads kkkk1UU2aaaa: the kept prefix, turn 1 pinned, turn 2 the reply");
    if (map > 0) {
        chtype kept = mvwinch(w, map, 1), pinned = mvwinch(w, map, 6), reply = mvwinch(w, map, 9),
               free_ = mvwinch(w, map, 13);
        CHECK(!(kept & A_REVERSE) && !(pinned & A_REVERSE),
              "the kept prefix and the pinned turn are not evicted");
        CHECK((reply & A_REVERSE) && (reply & A_CHARTEXT) == 'a',
              "the reply, next to go, is outlined and still an 'a'");
        CHECK((free_ & A_CHARTEXT) == '.', "free cells are dots");
    }
    CHECK(legend, "a legend with the tokens per cell");
    delwin(w);
    cm_free(&m);
    term_close(&ft);
}

/* The map shades each turn by its share of where the replies read (the last attention event):
 * brightness on the writer's letter and colour, so who wrote what reads with colour and without;
 * the shares follow an eviction's renumbering, the forecast says what the next eviction's turns
 * held, and F6 lists the turns with their shares. */
static void map_shades_attention(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    small_window(&m);
    /* the engine's spans: the kept prefix, the preamble inside it (empty), message, reply */
    apply(&m, "{\"ev\":\"attention\",\"conv\":1,\"spans\":[[0,4],[4,0],[4,3],[7,5]],"
              "\"mean\":[0.01,0,0.05,0.94],\"max\":[0.1,0,0.3,1],\"tokens\":4}");
    cm_conv *c = cm_conv_get(&m, 1);
    unsigned char drop[12] = {0};
    drop[8] = drop[9] = 1; /* two of the reply's five cells */
    CHECK(c && c->have_read && fabs(cm_read_share(c, drop) - 0.94 * 2 / 5) < 1e-9,
          "a share spread over its turn's cells: %g", c ? cm_read_share(c, drop) : -1);
    wchar_t line[128];
    for (int pass = 0; pass < 2; pass++)
        for (int color = 0; color < 2; color++) {
            screen scr = {.color = color};
            WINDOW *w = newwin(40, 60, 0, 0);
            cache_panel_draw(&m, 1, &scr, w);
            /* the kept prefix (1%), the message (5%, evicted on the second pass), the reply (94%) */
            const wchar_t *want = pass ? L"kkkk1aaaa." : L"kkkk1uu2aaaa.";
            int map = -1, said = 0, legend = 0;
            for (int y = 1; y < 39; y++) {
                row(w, y, line, 127);
                if (map < 0 && !wcsncmp(line + 1, want, wcslen(want)))
                    map = y;
                said |= wcsstr(line, pass ? L"of attention" : L"99% of attention") != NULL;
                legend |= wcsstr(line, L"<2% <10% <25% more") != NULL;
            }
            const char *how = color ? "colour" : "monochrome";
            CHECK(map > 0, "%s, %s: the map reads %ls", pass ? "after the eviction" : "before", how,
                  want);
            CHECK(said, "%s, %s: the forecast says the attention its turns held",
                  pass ? "after" : "before", how);
            CHECK(legend, "%s, %s: the ramp's legend", pass ? "after" : "before", how);
            if (map > 0) {
                chtype kept = mvwinch(w, map, 1), reply = mvwinch(w, map, pass ? 6 : 9),
                       user = mvwinch(w, map, 6);
                CHECK((kept & A_DIM) && !(kept & A_BOLD), "%s: the least-read turn is dim", how);
                CHECK((reply & A_BOLD) && (reply & A_UNDERLINE),
                      "%s: the most-read turn is bold and underlined", how);
                CHECK(pass || !(user & (A_BOLD | A_DIM | A_UNDERLINE)),
                      "%s: a turn read <10%% is plain", how);
                CHECK(!color || ((reply & A_COLOR) == (chtype)COLOR_PAIR(CP_ASSISTANT) &&
                                 (kept & A_COLOR) == (chtype)COLOR_PAIR(CP_KEEP) &&
                                 (pass || (user & A_COLOR) == (chtype)COLOR_PAIR(CP_USER))),
                      "%s: each cell keeps its writer's colour", how);
            }
            if (!color) {
                delwin(w);
                continue;
            }
            scr.conv_view = 1;
            cache_panel_draw(&m, 1, &scr, w);
            int listed = 0, kept = 0;
            for (int y = 1; y < 39; y++) {
                row(w, y, line, 127);
                listed |= wcsstr(line, L"gpt-2") && wcsstr(line, L"94.0% 100.0%");
                kept += !wcsncmp(line + 1, L"kept ", 5) || !wcsncmp(line + 1, L"preamble", 8);
            }
            CHECK(listed, "%s: F6 lists the reply with its share and its head's",
                  pass ? "after" : "before");
            /* the preamble inside the kept prefix is one row (issue 46 saw it listed twice) */
            CHECK(kept == 1, "%s: F6 lists the kept prefix in %d rows", pass ? "after" : "before",
                  kept);
            delwin(w);
            /* the message goes: the reply's share goes with the reply */
            apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":3,\"recomputed\":5,"
                      "\"ranges\":[[4,3]]}");
        }
    cm_free(&m);
    term_close(&ft);
}

/* events (JSON text) applied to the cache model m and the chat pane p, as the chat applies them */
static void pane_events(cache_model *m, chat_pane *p, const char *const *evs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_loads(evs[i], 0, NULL);
        cm_apply(m, ev);
        chat_pane_apply(p, ev, NULL);
        json_decref(ev);
    }
}

/* The chat pane shows the cache: messages whose turns were evicted are dimmed, a pinned one's name
 * carries a *, the rest as ever (monochrome: the attributes read back) */
static void pane_shows_the_window(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    const char *evs[] = {
        "{\"ev\":\"new\",\"conv\":1,\"window\":64}",
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"one\"}",
        "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3],\"cached\":0}",
        "{\"ev\":\"token\",\"conv\":1,\"id\":4,\"text\":\"r1\"}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"r1\",\"tokens\":1}",
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"two\"}",
        "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[5,6],\"cached\":4}",
        "{\"ev\":\"token\",\"conv\":1,\"id\":7,\"text\":\"r2\"}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"r2\",\"tokens\":1}",
        /* the first turn and its reply evicted; the second message (now turn 0) pinned */
        "{\"ev\":\"evict\",\"conv\":1,\"keep\":0,\"dropped\":4,\"recomputed\":3,"
        "\"ranges\":[[0,4]]}",
        "{\"ev\":\"pin\",\"conv\":1,\"turn\":0,\"pinned\":true}",
    };
    chat_pane p = {0};
    pane_events(&m, &p, evs, sizeof evs / sizeof *evs);
    for (int color = 0; color < 2; color++) { /* dim in colour too (issue 46 saw it dropped) */
        screen scr = {.color = color};
        const char *how = color ? "colour" : "monochrome";
        WINDOW *w = newwin(12, 40, 0, 0);
        chat_pane_draw(&p, &scr, w, NULL, NULL, cm_conv_get(&m, 1));
        wchar_t line[64];
        int rows[4] = {-1, -1, -1, -1};
        const wchar_t *texts[] = {L"one", L"r1", L"two", L"r2"};
        for (int y = 0; y < 12; y++) {
            row(w, y, line, 63);
            for (int k = 0; k < 4; k++)
                if (rows[k] < 0 && !wcsncmp(line + 7, texts[k], wcslen(texts[k])))
                    rows[k] = y;
        }
        CHECK(rows[0] >= 0 && rows[3] > rows[0], "%s: the four messages are drawn", how);
        if (rows[0] >= 0 && rows[3] >= 0) {
            CHECK((mvwinch(w, rows[0], 7) & A_DIM) && (mvwinch(w, rows[1], 7) & A_DIM),
                  "%s: the evicted message and reply are dimmed", how);
            CHECK(!(mvwinch(w, rows[2], 7) & A_DIM) && !(mvwinch(w, rows[3], 7) & A_DIM),
                  "%s: what the window holds is not", how);
            CHECK((mvwinch(w, rows[2], 5) & A_CHARTEXT) == '*' &&
                      (mvwinch(w, rows[3], 5) & A_CHARTEXT) != '*',
                  "%s: the pinned message's name carries a *, the reply's does not", how);
        }
        delwin(w);
    }
    chat_pane_free(&p);
    cm_free(&m);
    term_close(&ft);
}

/* Dim means one thing, what the model does not see: a message's beginning cut to fit the window is
 * dim and its kept end is not; names and kvchat's notices are never dim (monochrome: the
 * attributes read back) */
static void dim_is_unseen(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    const char *evs[] = {
        "{\"ev\":\"new\",\"conv\":1,\"window\":64}",
        "{\"ev\":\"user\",\"conv\":1,\"text\":\"gonegone kept\"}",
        "{\"ev\":\"notice\",\"conv\":1,\"text\":\"its beginning was cut\",\"tokens\":4,"
        "\"kept\":2,\"cut_bytes\":8}",
        "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2],\"cached\":0}",
        "{\"ev\":\"token\",\"conv\":1,\"id\":4,\"text\":\"r1\"}",
        "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"r1\",\"tokens\":1}",
    };
    chat_pane p = {0};
    pane_events(&m, &p, evs, sizeof evs / sizeof *evs);
    screen scr = {.color = 0};
    WINDOW *w = newwin(12, 40, 0, 0);
    chat_pane_draw(&p, &scr, w, NULL, NULL, cm_conv_get(&m, 1));
    wchar_t line[64];
    int user = -1, notice = -1;
    for (int y = 0; y < 12; y++) {
        row(w, y, line, 63);
        user = user < 0 && !wcsncmp(line + 7, L"gonegone kept", 13) ? y : user;
        notice = notice < 0 && wcsstr(line, L"its beginning was cut") ? y : notice;
    }
    CHECK(user >= 0 && notice >= 0, "the message and the notice are drawn (%d, %d)", user, notice);
    if (user >= 0 && notice >= 0) {
        CHECK((mvwinch(w, user, 7) & A_DIM) && (mvwinch(w, user, 14) & A_DIM),
              "the cut beginning is dim");
        CHECK(!(mvwinch(w, user, 16) & A_DIM) && !(mvwinch(w, user, 19) & A_DIM),
              "the kept end is not");
        CHECK(!(mvwinch(w, user, 0) & A_DIM), "the name is not dim");
        CHECK(!(mvwinch(w, notice, 7) & A_DIM), "a notice is not dim");
    }
    delwin(w);
    chat_pane_free(&p);
    cm_free(&m);
    term_close(&ft);
}

/* A prepared eviction's cost was paid while the user typed: the log and the turn's line say what
 * was done ahead and what the reply waited, not "re-prefilled in 0 ms" */
static void prepared_eviction_said(void)
{
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"prepare\",\"conv\":1,\"tokens\":162,\"ms\":351,\"ready\":true}");
    apply(&m, "{\"ev\":\"user\",\"conv\":1,\"text\":\"hi\"}");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":0,\"dropped\":81,\"recomputed\":170,"
              "\"ms\":3,\"ranges\":[],\"prepared\":true,\"stall_ms\":3}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3,4,5,6,7,8],\"cached\":0,"
              "\"ms\":8}");
    apply(&m, "{\"ev\":\"token\",\"conv\":1,\"id\":9,\"ms\":2}");
    const char *e = cm_log_find(&m, 0, LOG_EVICTIONS, 0);
    CHECK(e && !strcmp(e, "conv 1 evicted 81 tok; 162 re-prefilled ahead in 351 ms, 8 then; "
                          "waited 3.00 ms"),
          "the log: '%s'", e ?: "");
    char sum[256];
    json_t *end =
        json_loads("{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"x\",\"tokens\":1}", 0, NULL);
    CHECK(cm_turn_summary(&m, end, sum, sizeof sum) &&
              strstr(sum, " · evicted 81 tok; 162 re-prefilled ahead in 351 ms, 8 then; the reply "
                          "waited 3.00 ms"),
          "the turn: '%s'", sum);
    json_decref(end);
    cm_free(&m);
}

/* The panel at every width from 30 to 300 columns (40 and 24 rows, the map and the F6 table):
 * fields drop to a brief form or the next row before anything is cut, so no row holds an ellipsis.
 * The model has every field, with numbers as wide as a 1.5B model's on a GPU make them. */
static void panel_never_cuts(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"model\",\"conv\":0,\"t\":0,\"name\":\"gpt2-xl\",\"backend\":\"cuda\","
              "\"params\":1557611200,\"weights_bytes\":3115222400,\"pool_bytes\":4294967296,"
              "\"workspace_bytes\":31457280,\"memory_total_bytes\":150754820096}");
    apply(&m, "{\"ev\":\"new\",\"conv\":1,\"t\":0,\"window\":1024}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"t\":1,\"ids\":[1,2,3,4,5,6,7,8,9,10,11,12],"
              "\"cached\":0,\"preamble\":2,\"ms\":1234.5}");
    for (int i = 0; i < 40; i++)
        apply(&m, "{\"ev\":\"token\",\"conv\":1,\"t\":2,\"id\":9,\"ms\":12.5}");
    apply(&m, "{\"ev\":\"grow\",\"conv\":1,\"t\":2,\"from\":1008,\"to\":1024,"
              "\"bytes\":1966080000,\"copied\":0,\"ms\":1234.5}");
    apply(&m, "{\"ev\":\"prepare\",\"conv\":1,\"t\":3,\"tokens\":900,\"ms\":3512,"
              "\"ready\":true}");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"t\":3,\"keep\":2,\"dropped\":8,"
              "\"recomputed\":900,\"ms\":0.5,\"ranges\":[[2,8]],\"prepared\":true,"
              "\"stall_ms\":0.5}");
    apply(&m, "{\"ev\":\"fidelity\",\"conv\":1,\"t\":3,\"top1\":false,\"kl\":0.000123,"
              "\"tokens\":1000,\"agree_rate\":0.987}");
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"t\":4,\"tokens\":44,\"capacity\":1024,"
              "\"window\":1024,\"bytes_used\":1572864000,\"bytes_reserved\":1966080000,"
              "\"pool_bytes\":4294967296,\"pool_used\":3932160000,\"fragmentation\":393216000,"
              "\"hit_rate\":0.987,\"blocks_used\":1000,\"blocks_total\":4096,"
              "\"shared_blocks\":1000,\"offloaded_convs\":12,\"keep\":2,\"evict_min\":256,"
              "\"reply_room\":1000,\"cache_dtype\":\"bf16\",\"layout\":\"paged\",\"host_bytes\":0,"
              "\"approximate\":true,\"memory_free\":120754820096,\"memory_total\":150754820096}");
    apply(&m, "{\"ev\":\"attention\",\"conv\":1,\"t\":4,\"spans\":[[0,2],[2,0],[2,10],[12,32]],"
              "\"mean\":[0.5,0,0.123,0.377],\"max\":[1,0,0.9,0.8],\"tokens\":16}");
    apply(&m, "{\"ev\":\"fork\",\"conv\":12,\"t\":4,\"parent\":1,\"shared_blocks\":1000}");
    apply(&m, "{\"ev\":\"offload\",\"conv\":12,\"t\":5,\"tokens\":1000,"
              "\"bytes\":1966080000,\"ms\":1234.5}");
    int cut = 0, worst_w = 0, worst_y = 0;
    wchar_t line[320], worst[320] = L"";
    for (int view = 0; view < 2; view++)
        for (int h = 24; h <= 40; h += 16)
            for (int W = 30; W <= 300 && !cut; W++) {
                screen scr = {.color = 1, .conv_view = view};
                WINDOW *w = newwin(h, W, 0, 0);
                cache_panel_draw(&m, 1, &scr, w);
                for (int y = 0; y < h && !cut; y++) {
                    row(w, y, line, 319);
                    if (wcsstr(line, L"\u2026")) {
                        cut = 1, worst_w = W, worst_y = y;
                        wcscpy(worst, line);
                    }
                }
                delwin(w);
            }
    CHECK(!cut, "at %d columns row %d is cut: %ls", worst_w, worst_y, worst);
    cm_free(&m);
    term_close(&ft);
}

/* The panel numbers turns as the engine does (/pin's numbers, the map's digits): an eviction at a
 * turn's start takes an emptied reply turn with it (one inside a reply keeps the reply's), and a
 * reply of no tokens is a turn, as the turn's end records */
static void turns_numbered_as_the_engine(void)
{
    cache_model m;
    small_window(&m);
    cm_conv *c = cm_conv_get(&m, 1);
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":5,\"recomputed\":0,"
              "\"ms\":1,\"mode\":\"exact\",\"ranges\":[[7,5]]}");
    CHECK(c && c->n_turns == 2 && c->n_cells == 7,
          "an eviction at a turn's start that empties the reply: %d turns (want 2), %d cells",
          c ? c->n_turns : -1, c ? c->n_cells : -1);
    /* a reply of no tokens: the turn's end says it is a turn; the next message is turn 3 */
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[8,8],\"cached\":7,\"ms\":1}");
    apply(&m, "{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"\",\"tokens\":0,\"window\":"
              "[1,2,3,4,5,6,7,8,8],\"turns\":[[0,4,0,false],[4,3,1,false],[7,2,1,false],"
              "[9,0,2,false]],\"keep\":4,\"rng\":\"0\",\"sampling\":{}}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[6,6,6],\"cached\":9,\"ms\":1}");
    apply(&m, "{\"ev\":\"pin\",\"conv\":1,\"turn\":4,\"pinned\":true}");
    CHECK(c && c->n_turns == 5 && c->turns[4].start == 9 && c->turns[4].len == 3 &&
              c->turns[4].pinned && c->turns[3].len == 0,
          "after a reply of no tokens: %d turns (want 5), turn 4 at %d of %d tokens, pinned %d",
          c ? c->n_turns : -1, c && c->n_turns > 4 ? c->turns[4].start : -1,
          c && c->n_turns > 4 ? c->turns[4].len : -1, c && c->n_turns > 4 && c->turns[4].pinned);
    cm_free(&m);
}

/* An eviction made at a turn's start (not prepared) counts in that turn's time to first token and
 * its reply line (after a previous reply, whose tokens once made it count nowhere) */
static void eviction_time_counted(void)
{
    cache_model m;
    small_window(&m);
    apply(&m, "{\"ev\":\"user\",\"conv\":1,\"text\":\"hi\"}");
    apply(&m, "{\"ev\":\"evict\",\"conv\":1,\"keep\":4,\"dropped\":8,\"recomputed\":0,"
              "\"ms\":50,\"mode\":\"exact\",\"ranges\":[[4,8]]}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[8,8],\"cached\":4,\"ms\":10}");
    apply(&m, "{\"ev\":\"token\",\"conv\":1,\"id\":9,\"ms\":5}");
    json_t *end = json_loads("{\"ev\":\"turn_end\",\"conv\":1,\"reply\":\"x\",\"tokens\":1,"
                             "\"window\":[1,2,3,4,8,8,9],\"turns\":[[0,4,0,false],[4,2,1,false],"
                             "[6,1,2,false]],\"keep\":4,\"rng\":\"0\",\"sampling\":{}}",
                             0, NULL);
    cm_apply(&m, end);
    cm_conv *c = cm_conv_get(&m, 1);
    char line[512] = "";
    cm_turn_summary(&m, end, line, sizeof line);
    json_decref(end);
    CHECK(c && c->evict_ms == 50 && c->ttft_ms == 65 && strstr(line, "re-prefilled in 50"),
          "the eviction's 50 ms: counted %g, TTFT %g (want 65); \"%s\"", c ? c->evict_ms : -1,
          c ? c->ttft_ms : -1, line);
    cm_free(&m);
}

/* At a turn's start with room kept for a reply (--evict-at turn), the forecast counts for a next
 * message as long as the longest in the window, and says so where there is room */
static void forecast_says_its_guess(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    small_window(&m);
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":40,\"keep\":4,\"evict_min\":5,"
              "\"reply_room\":2}");
    screen scr = {0};
    WINDOW *w = newwin(60, 100, 0, 0);
    cache_panel_draw(&m, 1, &scr, w);
    wchar_t line[128];
    int said = 0;
    for (int y = 0; y < 60; y++) {
        row(w, y, line, 127);
        said |= wcsstr(line, L"next eviction in") && wcsstr(line, L"as long as the longest");
    }
    CHECK(said, "the forecast says it counts for a message as long as the longest");
    delwin(w);
    cm_free(&m);
    term_close(&ft);
}

/* F6's "used": a conversation's own turns refresh it, another's fork of it (share) and an idle
 * offload do not; it ages with the clock while nothing happens; a resume starts the clock again
 * and keeps what each conversation's "used" said */
static void used_ages(void)
{
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2],\"cached\":0,\"ms\":1,\"t\":1}");
    apply(&m, "{\"ev\":\"prefill\",\"conv\":2,\"ids\":[1,2],\"cached\":0,\"ms\":1,\"t\":2}");
    apply(&m, "{\"ev\":\"share\",\"conv\":1,\"blocks\":1,\"t\":30}");
    apply(&m, "{\"ev\":\"offload\",\"conv\":2,\"bytes\":1,\"ms\":1,\"t\":40}");
    cm_tick(&m, 100);
    cm_conv *a = cm_conv_get(&m, 1), *b = cm_conv_get(&m, 2);
    CHECK(a && b && m.now == 100 && a->last_t == 1 && b->last_t == 2,
          "used: now %g, conv 1 at %g (want 1), conv 2 at %g (want 2)", m.now, a ? a->last_t : -1,
          b ? b->last_t : -1);
    apply(&m, "{\"ev\":\"resume\",\"conv\":0,\"t\":0.5}");
    CHECK(a && m.now == 0.5 && fabs((m.now - a->last_t) - 99) < 1e-9,
          "after a resume at 0.5 s: now %g, conv 1 used %g s ago (want 99)", m.now,
          a ? m.now - a->last_t : -1);
    cm_free(&m);
}

/* Scrolled back, the chat pane's last row says how far, and the text takes the rows above it (the
 * line was drawn over a message); scrolled to the top, the first line shows */
static void pane_scroll_line_apart(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    chat_pane p = {0};
    char text[32];
    for (int i = 0; i < 12; i++) {
        snprintf(text, sizeof text, "message %d", i);
        chat_pane_add(&p, ROLE_USER, text, strlen(text));
    }
    screen scr = {0};
    WINDOW *w = newwin(8, 60, 0, 0);
    wchar_t line[64];
    chat_pane_scroll(&p, 3);
    chat_pane_draw(&p, &scr, w, NULL, NULL, NULL);
    row(w, 7, line, 63);
    CHECK(wcsstr(line, L"-- 3 lines below --") && !wcsstr(line, L"message"),
          "the last row holds the scroll line alone: %ls", line);
    chat_pane_scroll(&p, 100);
    chat_pane_draw(&p, &scr, w, NULL, NULL, NULL);
    row(w, 0, line, 63);
    CHECK(wcsstr(line, L"message 0"), "scrolled to the top, the first message shows: %ls", line);
    delwin(w);
    chat_pane_free(&p);
    term_close(&ft);
}

/* The panel's log wraps a line between words, never between a figure and its unit */
static void log_keeps_units(void)
{
    fake_term ft;
    if (term_open(&ft))
        return;
    cache_model m;
    cm_init(&m);
    apply(&m, "{\"ev\":\"prefill\",\"conv\":1,\"ids\":[1,2,3],\"cached\":0,\"ms\":1}");
    apply(&m, "{\"ev\":\"stats\",\"conv\":1,\"window\":64,\"capacity\":16}");
    int ok = 0, seen = 0;
    for (int width = 22; width <= 40; width++) { /* somewhere the line wraps near the figure */
        apply(&m, "{\"ev\":\"grow\",\"conv\":1,\"from\":16,\"to\":32,\"bytes\":65536,"
                  "\"ms\":0.5}");
        screen scr = {0};
        WINDOW *w = newwin(40, width, 0, 0);
        cache_panel_draw(&m, 1, &scr, w);
        wchar_t line[64];
        for (int y = 1; y < 39; y++) {
            row(w, y, line, 63);
            if (wcsstr(line, L"+64.0")) {
                seen++;
                ok += wcsstr(line, L"+64.0 KiB") != NULL;
            }
        }
        delwin(w);
    }
    CHECK(seen > 0 && ok == seen, "\"+64.0\" beside its unit on %d of %d rows", ok, seen);
    cm_free(&m);
    term_close(&ft);
}

TEST_TABLE(ui_tests, {"ui/chat_pane_from_events", pane_from_events},
           {"ui/turns_numbered_as_the_engine", turns_numbered_as_the_engine},
           {"ui/eviction_time_counted", eviction_time_counted},
           {"ui/forecast_says_its_guess", forecast_says_its_guess}, {"ui/used_ages", used_ages},
           {"ui/pane_scroll_line_apart", pane_scroll_line_apart},
           {"ui/log_keeps_units", log_keeps_units},
           {"ui/map_shades_attention", map_shades_attention},
           {"ui/hostile_numbers_clamped_and_drawn", hostile_numbers},
           {"ui/character_widths", widths}, {"ui/wrapping", wrapping},
           {"ui/layout_any_size", layouts}, {"ui/graph_scaling", graph_scaling},
           {"ui/graph_marks_keep_shape", graph_marks_keep_shape}, {"ui/formats", formats},
           {"ui/cache_model_from_events", model_from_events}, {"ui/panel_reads", panel_reads},
           {"ui/log_runs_and_filters", log_runs_and_filters},
           {"ui/panel_before_first_message", panel_before_first_message},
           {"ui/conversations_view", conversations_view}, {"ui/map_reads", map_reads},
           {"ui/panel_never_cuts_at_any_width", panel_never_cuts},
           {"ui/prepared_eviction_said", prepared_eviction_said},
           {"ui/chat_pane_shows_the_window", pane_shows_the_window},
           {"ui/dim_is_what_the_model_does_not_see", dim_is_unseen});
