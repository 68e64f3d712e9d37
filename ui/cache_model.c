#include "cache_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/clamp.h"
#include "../kernels/err.h"
#include "../model/events.h"
#include "format.h"

void cm_init(cache_model *m) { memset(m, 0, sizeof *m); }

void cm_free(cache_model *m)
{
    for (int i = 0; i < m->n_convs; i++)
        free(m->convs[i].turns);
    free(m->convs);
    memset(m, 0, sizeof *m);
}

cm_conv *cm_conv_get(cache_model *m, int id)
{
    for (int i = 0; i < m->n_convs; i++)
        if (m->convs[i].id == id)
            return &m->convs[i];
    return NULL;
}

static cm_conv *conv_for(cache_model *m, int id)
{
    cm_conv *c = cm_conv_get(m, id);
    if (c)
        return c;
    if (err_grow(&m->convs, &m->cap_convs, (size_t)m->n_convs + 1, sizeof *m->convs,
                 "the cache panel's conversations"))
        return NULL;
    c = &m->convs[m->n_convs++];
    memset(c, 0, sizeof *c);
    c->id = id;
    return c;
}

static int log_slot(const cache_model *m, int i)
{
    return (m->log_head - 1 - i + 2 * CM_LOG_LINES) % CM_LOG_LINES;
}

/* A line of conversation conv's, of a kind ('e', 'g' or 0); replace: over the newest line. */
static void logk(cache_model *m, int conv, char kind, int replace, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void logk(cache_model *m, int conv, char kind, int replace, const char *fmt, ...)
{
    int slot = replace && m->log_n ? log_slot(m, 0) : m->log_head;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->log[slot], sizeof m->log[0], fmt, ap);
    va_end(ap);
    m->log_conv[slot] = conv;
    m->log_kind[slot] = kind;
    if (slot != m->log_head)
        return;
    m->log_head = (m->log_head + 1) % CM_LOG_LINES;
    if (m->log_n < CM_LOG_LINES)
        m->log_n++;
}

const char *cm_log_line(const cache_model *m, int i) { return cm_log_find(m, i, LOG_ALL, 0); }

const char *cm_log_find(const cache_model *m, int i, cm_log_filter f, int conv)
{
    for (int k = 0; k < m->log_n; k++) {
        int s = log_slot(m, k);
        if ((f == LOG_EVICTIONS && m->log_kind[s] != 'e') ||
            (f == LOG_CONV && m->log_conv[s] != conv))
            continue;
        if (i-- == 0)
            return m->log[s];
    }
    return NULL;
}

static int add_turn(cm_conv *c, int role)
{
    if (err_grow(&c->turns, &c->cap_turns, (size_t)c->n_turns + 1, sizeof *c->turns,
                 "the panel's turns"))
        return -1;
    c->turns[c->n_turns++] = (win_turn){.start = c->n_cells, .role = role};
    return 0;
}

static void append(cm_conv *c, int role, int n)
{
    n = clamp_int(n, 0, CM_MAX_CELLS - c->n_cells);
    if (n <= 0)
        return;
    if ((!c->n_turns || c->turns[c->n_turns - 1].role != role) && add_turn(c, role))
        return;
    c->turns[c->n_turns - 1].len += n;
    c->n_cells += n;
}

static void cut(cm_conv *c, int to)
{
    if (to >= c->n_cells)
        return;
    c->n_cells = to < 0 ? 0 : to;
    while (c->n_turns && c->turns[c->n_turns - 1].start >= c->n_cells)
        c->n_turns--;
    if (c->n_turns) {
        win_turn *t = &c->turns[c->n_turns - 1];
        t->len = c->n_cells - t->start;
    }
}

/* removes [s, s + len) and renumbers the turns after it */
static void remove_span(cm_conv *c, int s, int len)
{
    if (s < 0 || len <= 0 || s >= c->n_cells)
        return;
    len = s + len > c->n_cells ? c->n_cells - s : len;
    int nt = 0;
    for (int i = 0; i < c->n_turns; i++) {
        win_turn t = c->turns[i];
        int a = t.start, b = t.start + t.len;
        int ov0 = a > s ? a : s, ov1 = b < s + len ? b : s + len;
        if (ov1 > ov0)
            t.len -= ov1 - ov0;
        t.start = a >= s + len ? a - len : a > s ? s : a;
        if (t.len > 0 || i == c->n_turns - 1)
            c->turns[nt++] = t;
    }
    c->n_turns = nt;
    c->n_cells -= len;
}

/* a position or a count of cells, clamped so that sums of two cannot overflow */
static int cells(const json_t *j)
{
    json_int_t v = json_integer_value(j);
    return (int)clamp_ll(v, -CM_MAX_CELLS, CM_MAX_CELLS);
}
static int getpos(const json_t *ev, const char *k) { return cells(json_object_get(ev, k)); }
static int geti(const json_t *ev, const char *k)
{
    return (int)json_integer_value(json_object_get(ev, k));
}
static double getd(const json_t *ev, const char *k)
{
    return json_number_value(json_object_get(ev, k));
}

void cm_apply(cache_model *m, const json_t *ev)
{
    const char *type = json_string_value(json_object_get(ev, "ev"));
    if (!type)
        return;
    char a[32], b[32];
    if (!strcmp(type, EV_MODEL)) {
        snprintf(m->model, sizeof m->model, "%s",
                 json_string_value(json_object_get(ev, "name")) ?: "?");
        snprintf(m->backend, sizeof m->backend, "%s",
                 json_string_value(json_object_get(ev, "backend")) ?: "?");
        m->weights_bytes = getd(ev, "weights_bytes");
        m->workspace_bytes = getd(ev, "workspace_bytes");
        m->memory_total = getd(ev, "memory_total_bytes");
        m->params = getd(ev, "params");
        m->pool_bytes = getd(ev, "pool_bytes");
        m->random_weights = json_is_true(json_object_get(ev, "random_weights"));
        m->n_ctx = geti(ev, "n_ctx");
        return;
    }
    cm_conv *c = conv_for(m, geti(ev, "conv"));
    if (!c)
        return;
    double when = getd(ev, "t");
    if (when > m->now && when < 1e12)
        m->now = when;
    c->last_t = when > 0 && when < 1e12 ? when : c->last_t;
    if (!strcmp(type, EV_USER) || !strcmp(type, EV_RETRY) ||
        !strcmp(type, EV_EDIT)) { /* a turn begins */
        c->turn_dropped = c->turn_recomputed = 0;
        c->evict_ms = c->pending_evict_ms = 0;
    } else if (!strcmp(type, EV_PREFILL)) {
        size_t n = json_array_size(json_object_get(ev, "ids"));
        int pre = clamp_int(getpos(ev, "preamble"), 0, (int)(n < CM_MAX_CELLS ? n : CM_MAX_CELLS));
        if (c->prefill_tokens || c->decode_tokens) { /* the previous turn is complete */
            c->turns_seen++;
            c->avg_turn_tokens +=
                (c->prefill_tokens + c->decode_tokens - c->avg_turn_tokens) / c->turns_seen;
        }
        cut(c, getpos(ev, "cached"));
        append(c, ROLE_PREAMBLE, pre);
        append(c, ROLE_USER, (int)n - pre);
        c->prefill_tokens = (int)n;
        c->prefill_ms = getd(ev, "ms");
        c->evict_ms = c->pending_evict_ms;
        c->pending_evict_ms = 0;
        c->prefill_tok_s = c->prefill_ms > 0 ? n / (c->prefill_ms / 1e3) : 0;
        c->decode_tokens = 0;
        c->decode_ms = 0;
        c->awaiting_first = 1;
        graph_push(&c->history, c->n_cells, 0);
    } else if (!strcmp(type, EV_TOKEN)) {
        append(c, ROLE_ASSISTANT, 1);
        double ms = getd(ev, "ms");
        if (c->awaiting_first) {
            c->ttft_ms = c->evict_ms + c->prefill_ms + ms;
            c->awaiting_first = 0;
        }
        c->decode_tokens++;
        c->decode_ms += ms;
        c->decode_tok_s = c->decode_ms > 0 ? c->decode_tokens / (c->decode_ms / 1e3) : 0;
        graph_push(&c->history, c->n_cells, 0);
    } else if (!strcmp(type, EV_TRUNCATE)) {
        cut(c, getpos(ev, "to"));
        c->prepared = 0; /* a plan does not survive a rollback */
        graph_push(&c->history, c->n_cells, 0);
        logk(m, c->id, 0, 0, "conv %d truncate %d->%d tok", c->id, geti(ev, "from"),
             geti(ev, "to"));
    } else if (!strcmp(type, EV_EVICT)) {
        json_t *ranges = json_object_get(ev, "ranges"), *r;
        for (int i = (int)json_array_size(ranges) - 1; i >= 0;
             i--) { /* from the end: earlier starts stay valid */
            r = json_array_get(ranges, (size_t)i);
            remove_span(c, cells(json_array_get(r, 0)), cells(json_array_get(r, 1)));
        }
        if (!strncmp(json_string_value(json_object_get(ev, "mode")) ?: "", "shift", 5))
            c->approximate = 1;
        int prepared = json_is_true(json_object_get(ev, "prepared"));
        /* live, before the turn's stats: one more eviction, and its time where the turn feels it */
        c->evictions++;
        c->turn_dropped += clamp_int(geti(ev, "dropped"), 0, CM_MAX_CELLS);
        c->turn_recomputed += clamp_int(geti(ev, "recomputed"), 0, CM_MAX_CELLS);
        if (c->decode_tokens)
            c->evict_ms += getd(ev, "ms");
        else
            c->pending_evict_ms += getd(ev, "ms");
        c->prepared = 0;
        c->evictions_prepared += prepared;
        c->stall_ms += getd(ev, "stall_ms");
        graph_push(&c->history, c->n_cells, prepared ? 'P' : 'E');
        logk(m, c->id, 'e', 0, "conv %d evict -%d tok, re-prefill %d tok %s%s%s", c->id,
             geti(ev, "dropped"), geti(ev, "recomputed"), fmt_ms(a, sizeof a, getd(ev, "ms")),
             prepared ? " (prepared)" : "", c->approximate ? " (approx)" : "");
    } else if (!strcmp(type, EV_PREPARE)) {
        int ready = json_is_true(json_object_get(ev, "ready"));
        c->prepared = ready ? geti(ev, "tokens") > 0 ? geti(ev, "tokens") : 1 : 0;
        logk(m, c->id, 0, 0, "conv %d next eviction %s: %d tok %s", c->id,
             ready ? "prepared" : "not prepared", geti(ev, "tokens"),
             fmt_ms(a, sizeof a, getd(ev, "ms")));
    } else if (!strcmp(type, EV_GROW)) {
        graph_mark(&c->history, 'G');
        c->capacity = clamp_int(geti(ev, "to"), 0, INT_MAX); /* live, before the turn's stats */
        c->grows++;
        c->bytes_reserved += getd(ev, "bytes");
        /* a run of grows of one conversation is one line: grow x7 16->128 tok +7.7 MiB */
        int run =
            m->log_n && m->log_kind[log_slot(m, 0)] == 'g' && m->log_conv[log_slot(m, 0)] == c->id;
        m->run_n = run ? m->run_n + 1 : 1;
        m->run_from = run ? m->run_from : geti(ev, "from");
        m->run_bytes = (run ? m->run_bytes : 0) + getd(ev, "bytes");
        if (m->run_n > 1)
            logk(m, c->id, 'g', 1, "conv %d grow x%d %d->%d tok +%s", c->id, m->run_n, m->run_from,
                 geti(ev, "to"), fmt_bytes(a, sizeof a, m->run_bytes));
        else
            logk(m, c->id, 'g', 0, "conv %d grow %d->%d tok +%s %s", c->id, geti(ev, "from"),
                 geti(ev, "to"), fmt_bytes(a, sizeof a, getd(ev, "bytes")),
                 fmt_ms(b, sizeof b, getd(ev, "ms")));
    } else if (!strcmp(type, EV_COW)) {
        logk(m, c->id, 0, 0, "conv %d copy-on-write %s", c->id,
             fmt_bytes(a, sizeof a, getd(ev, "copied")));
    } else if (!strcmp(type, EV_OFFLOAD) || !strcmp(type, EV_RESTORE)) {
        c->offloaded = type[0] == 'o';
        if (c->offloaded)
            graph_mark(&c->history, 'O');
        logk(m, c->id, 0, 0, "%s conv %d %s %s", type, c->id,
             fmt_bytes(a, sizeof a, getd(ev, "bytes")), fmt_ms(b, sizeof b, getd(ev, "ms")));
    } else if (!strcmp(type, EV_FORK)) {
        cm_conv *p = cm_conv_get(m, geti(ev, "parent"));
        win_turn *t = p && p != c && p->n_turns ? malloc(sizeof *t * (size_t)p->cap_turns) : NULL;
        if (t) { /* the fork starts as a copy of its parent: window, sizes, speeds, forecast */
            memcpy(t, p->turns, sizeof *t * (size_t)p->n_turns);
            free(c->turns);
            int id = c->id;
            *c = *p;
            c->id = id;
            c->turns = t;
            c->prepared = 0; /* a preparation is its parent's alone */
            c->shared_blocks = p->shared_blocks = clamp_int(geti(ev, "shared_blocks"), 0, INT_MAX);
        }
        graph_push(&c->history, c->n_cells, 'F');
        logk(m, c->id, 0, 0, "fork conv %d from %d, %d shared blocks", c->id, geti(ev, "parent"),
             geti(ev, "shared_blocks"));
    } else if (!strcmp(type, EV_PIN)) {
        int t = geti(ev, "turn");
        if (t >= 0 && t < c->n_turns)
            c->turns[t].pinned = json_is_true(json_object_get(ev, "pinned"));
    } else if (!strcmp(type, EV_FIDELITY)) {
        c->has_fidelity = 1;
        c->fid_top1 = json_is_true(json_object_get(ev, "top1"));
        c->fid_kl = getd(ev, "kl");
        c->fid_rate = getd(ev, "agree_rate");
    } else if (!strcmp(type, EV_NOTICE)) {
        logk(m, c->id, 0, 0, "conv %d: %s", c->id,
             json_string_value(json_object_get(ev, "text")) ?: "");
    } else if (!strcmp(type, EV_STATS)) {
        c->have_stats = 1;
        c->capacity = geti(ev, "capacity");
        c->window = clamp_int(getpos(ev, "window"), 0, CM_MAX_CELLS);
        c->keep = clamp_int(getpos(ev, "keep"), 0, CM_MAX_CELLS);
        c->evict_min = clamp_int(getpos(ev, "evict_min"), 0, CM_MAX_CELLS);
        c->bytes_used = getd(ev, "bytes_used");
        c->bytes_reserved = getd(ev, "bytes_reserved");
        c->fragmentation = getd(ev, "fragmentation");
        c->host_bytes = getd(ev, "host_bytes");
        c->hit_rate = getd(ev, "hit_rate");
        c->grows = geti(ev, "grows");
        c->evictions = geti(ev, "evictions");
        c->shared_blocks = geti(ev, "shared_blocks");
        c->approximate |= json_is_true(json_object_get(ev, "approximate"));
        snprintf(c->dtype, sizeof c->dtype, "%s",
                 json_string_value(json_object_get(ev, "cache_dtype")) ?: "");
        snprintf(c->layout, sizeof c->layout, "%s",
                 json_string_value(json_object_get(ev, "layout")) ?: "");
        m->pool_bytes = getd(ev, "pool_bytes");
        m->pool_used = getd(ev, "pool_used");
        m->blocks_used = geti(ev, "blocks_used");
        m->blocks_total = geti(ev, "blocks_total");
        m->offloaded_convs = geti(ev, "offloaded_convs");
        if (json_object_get(ev, "memory_total")) {
            m->memory_total = getd(ev, "memory_total");
            m->memory_free = getd(ev, "memory_free");
        }
    }
}

int cm_preview(const cm_conv *c, unsigned char *drop, int *tokens_left, double *turns_left)
{
    *tokens_left = c->window > c->n_cells ? c->window - c->n_cells : 0;
    *turns_left = c->avg_turn_tokens > 0 ? *tokens_left / c->avg_turn_tokens : 0;
    if (!c->window || !c->n_cells)
        return 0;
    /* as the engine will when the next message does not fit: at least evict_min, oldest turns first
     */
    int n = win_plan(c->turns, c->n_turns, c->n_cells, c->keep, 1, c->evict_min, 0, drop);
    return n < 0 ? 0 : n;
}

int cm_turn_summary(cache_model *m, const json_t *ev, char *buf, size_t n)
{
    const cm_conv *c = ev_is(ev, EV_TURN_END) && !json_is_true(json_object_get(ev, "failed"))
                           ? cm_conv_get(m, geti(ev, "conv"))
                           : NULL;
    if (!c)
        return 0;
    char a[32], b[32], r[32], t[32], e[96] = "";
    if (c->turn_dropped || c->turn_recomputed)
        snprintf(e, sizeof e, " · eviction: -%d tok, %d re-prefilled in %s", c->turn_dropped,
                 c->turn_recomputed, fmt_ms(t, sizeof t, c->evict_ms));
    snprintf(buf, n, "prompt %d tok in %s (%s) · reply %d tok at %s · TTFT %s%s", c->prefill_tokens,
             fmt_ms(a, sizeof a, c->prefill_ms), fmt_rate(b, sizeof b, c->prefill_tok_s),
             c->decode_tokens, fmt_rate(r, sizeof r, c->decode_tok_s),
             fmt_ms(t, sizeof t, c->ttft_ms), e);
    return 1;
}
