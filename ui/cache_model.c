#include "cache_model_impl.h"

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
    for (int i = 0; i < m->n_convs; i++) {
        free(m->convs[i].turns);
        free(m->convs[i].reads);
    }
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

static int add_turn(cm_conv *c, int role)
{
    if (err_grow(&c->turns, &c->cap_turns, (size_t)c->n_turns + 1, sizeof *c->turns,
                 "the panel's turns") ||
        err_grow(&c->reads, &c->cap_reads, (size_t)c->n_turns + 1, sizeof *c->reads,
                 "the panel's turns"))
        return -1;
    c->reads[c->n_turns] = (cm_read){0, 0};
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
    c->refilling = 0;
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

/* removes [s, s + len) and renumbers the turns after it: a turn emptied goes, as the engine's do
 * (app/chat/eviction.c), but for the reply still growing (open_last), which its next tokens join */
static void remove_span(cm_conv *c, int s, int len, int open_last)
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
        if (t.len > 0 || (open_last && i == c->n_turns - 1)) {
            c->reads[nt] = c->reads[i];
            c->turns[nt++] = t;
        }
    }
    c->n_turns = nt;
    c->n_cells -= len;
}

/* a position or a count of cells, clamped so that sums of two cannot overflow */
int cmi_cells(long long v) { return (int)clamp_ll(v, -CM_MAX_CELLS, CM_MAX_CELLS); }

/* the pool-wide totals of an event's "cache" block: a drafter's too, unless it has a pool of its
 * own (a draft model of another shape), whose figures are not the conversations' pool's */
static void apply_pool_totals(cache_model *m, const json_t *t)
{
    if (!t || ev_cache_own_pool(t))
        return;
    m->pool_used = ev_cache_pool_used(t);
    m->blocks_used = ev_cache_blocks_used(t);
    m->offloaded_convs = ev_cache_offloaded_convs(t);
}

/* The totals an event that changed the cache carries (its "cache" block): the figures agree with
 * the cache manager's own at every such event, not only at a turn's stats. */
void cmi_apply_totals(cache_model *m, cm_conv *c, const json_t *t)
{
    if (!t)
        return;
    c->capacity = clamp_int(ev_cache_capacity(t), 0, INT_MAX);
    c->refilled = clamp_int(ev_cache_tokens(t), 0, CM_MAX_CELLS);
    c->refilling = c->refilled < c->n_cells;
    c->bytes_per_token = ev_cache_bytes_per_token(t);
    c->bytes_used = ev_cache_bytes_used(t);
    c->bytes_reserved = ev_cache_bytes_reserved(t);
    c->shared_blocks = ev_cache_shared_blocks(t);
    c->host_bytes = ev_cache_host_bytes(t);
    apply_pool_totals(m, t);
}

/* the bytes in use after the window changed by tokens (a prefill, a token), which no event's
 * totals carry: the cache holds bytes_per_token for each */
static void count_used(cm_conv *c)
{
    if (!c->bytes_per_token)
        return;
    c->bytes_used = c->n_cells * c->bytes_per_token;
}

/* an attention event's shares onto the turns its spans fall in (the first span: the kept prefix);
 * a turn it does not name (newer than it) has none */
static void apply_reading(cm_conv *c, const json_t *ev)
{
    const json_t *spans = ev_attention_spans(ev), *mean = ev_attention_mean(ev),
                 *max = ev_attention_max(ev);
    for (int t = 0; t < c->n_turns; t++)
        c->reads[t] = (cm_read){0, 0};
    c->keep_read = (cm_read){0, 0};
    for (size_t i = 0; i < json_array_size(spans); i++) {
        const json_t *sp = json_array_get(spans, i);
        int start = cmi_cells(json_integer_value(json_array_get(sp, 0))),
            len = cmi_cells(json_integer_value(json_array_get(sp, 1)));
        cm_read r = {clamp_dbl(json_number_value(json_array_get(mean, i)), 0, 1),
                     clamp_dbl(json_number_value(json_array_get(max, i)), 0, 1)};
        if (i == 0) {
            c->keep_read = r;
            continue;
        }
        for (int t = 0; len > 0 && t < c->n_turns; t++)
            if (start >= c->turns[t].start && start < c->turns[t].start + c->turns[t].len)
                c->reads[t] = r;
    }
    c->have_read = 1;
}

static void on_model(cache_model *m, const json_t *ev)
{
    snprintf(m->model, sizeof m->model, "%s", ev_model_name(ev) ?: "?");
    snprintf(m->backend, sizeof m->backend, "%s", ev_model_backend(ev) ?: "?");
    m->weights_bytes = ev_model_weights_bytes(ev);
    m->workspace_bytes = ev_model_workspace_bytes(ev);
    m->memory_total = ev_model_memory_total_bytes(ev);
    m->params = ev_model_params(ev);
    m->pool_bytes = ev_model_pool_bytes(ev);
    m->random_weights = ev_model_random_weights(ev);
    m->n_ctx = ev_model_n_ctx(ev);
}

/* the panel can show its window before the first message */
static void on_new(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    c->window = clamp_int(cmi_cells(ev_new_window(ev)), 0, CM_MAX_CELLS);
}

/* a turn begins */
static void on_turn_start(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    (void)ev;
    c->turn_dropped = c->turn_recomputed = c->turn_prepared = 0;
    c->turn_ahead_ms = 0;
    c->turn_ahead_tokens = 0;
    c->evict_ms = c->pending_evict_ms = 0;
    cm_draft_turn(&c->draft);
}

static void on_prefill(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    size_t n = json_array_size(ev_prefill_ids(ev));
    int pre = clamp_int(cmi_cells(ev_prefill_preamble(ev)), 0,
                        (int)(n < CM_MAX_CELLS ? n : CM_MAX_CELLS));
    if (c->prefill_tokens || c->decode_tokens) { /* the previous turn is complete */
        c->turns_seen++;
        c->avg_turn_tokens +=
            (c->prefill_tokens + c->decode_tokens - c->avg_turn_tokens) / c->turns_seen;
    }
    cut(c, cmi_cells(ev_prefill_cached(ev)));
    append(c, ROLE_PREAMBLE, pre);
    append(c, ROLE_USER, (int)n - pre);
    c->prefill_tokens = (int)n;
    c->prefill_ms = ev_prefill_ms(ev);
    c->evict_ms = c->pending_evict_ms;
    c->pending_evict_ms = 0;
    c->prefill_tok_s = c->prefill_ms > 0 ? n / (c->prefill_ms / 1e3) : 0;
    c->decode_tokens = 0;
    c->decode_ms = 0;
    c->awaiting_first = 1;
    c->replying = 1;
    count_used(c);
    graph_push(&c->history, c->n_cells, 0);
}

static void on_token(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    append(c, ROLE_ASSISTANT, 1);
    double ms = ev_token_ms(ev);
    if (c->awaiting_first) {
        c->ttft_ms = c->evict_ms + c->prefill_ms + ms;
        c->awaiting_first = 0;
    }
    c->decode_tokens++;
    c->decode_ms += ms;
    c->decode_tok_s = c->decode_ms > 0 ? c->decode_tokens / (c->decode_ms / 1e3) : 0;
    count_used(c);
    graph_push(&c->history, c->n_cells, 0);
}

static void on_truncate(cache_model *m, cm_conv *c, const json_t *ev)
{
    if (c->draft.rejecting) { /* the drafts a verify pass rejected: no change to the window */
        c->draft.rejecting = 0;
        cmi_apply_totals(m, c, ev_truncate_cache(ev));
        return;
    }
    cut(c, cmi_cells(ev_truncate_to(ev)));
    cmi_apply_totals(m, c, ev_truncate_cache(ev));
    c->prepared = 0; /* a plan does not survive a rollback */
    graph_push(&c->history, c->n_cells, 0);
    cmi_log(m, c->id, 0, 0, "conv %d truncate %d->%d tok", c->id, ev_truncate_from(ev),
            ev_truncate_to(ev));
}

static void on_evict(cache_model *m, cm_conv *c, const json_t *ev)
{
    char a[32], b[32];
    const json_t *ranges = ev_evict_ranges(ev);
    for (int i = (int)json_array_size(ranges) - 1; i >= 0; i--) { /* earlier starts stay */
        const json_t *r = json_array_get(ranges, (size_t)i);
        remove_span(c, cmi_cells(json_integer_value(json_array_get(r, 0))),
                    cmi_cells(json_integer_value(json_array_get(r, 1))), c->replying);
    }
    cmi_apply_totals(m, c, ev_evict_cache(ev));
    if (!strncmp(ev_evict_mode(ev) ?: "", "shift", 5))
        c->approximate = 1;
    int prepared = ev_evict_prepared(ev);
    /* live, before the turn's stats: one more eviction, and its time where the turn feels it */
    c->evictions++;
    c->turn_dropped += clamp_int(ev_evict_dropped(ev), 0, CM_MAX_CELLS);
    c->turn_recomputed += clamp_int(ev_evict_recomputed(ev), 0, CM_MAX_CELLS);
    if (c->replying) /* inside a reply; else before the turn's prefill, which takes it up */
        c->evict_ms += ev_evict_ms(ev);
    else
        c->pending_evict_ms += ev_evict_ms(ev);
    /* a prepared eviction's re-prefill was done while the user typed: its time apart (its
     * own figures, or, recorded before they were, its plan's) */
    int own = ev_evict_has_ahead(ev);
    double ahead = !prepared ? 0 : own ? ev_evict_ahead_ms(ev) : c->prepared_ms;
    int ahead_tok = !prepared ? 0
                    : own     ? clamp_int(ev_evict_ahead(ev), 0, CM_MAX_CELLS)
                              : c->prepared_tokens,
        then = clamp_int(ev_evict_recomputed(ev) - ahead_tok, 0, CM_MAX_CELLS);
    c->turn_ahead_ms += ahead;
    c->turn_ahead_tokens += ahead_tok;
    c->turn_prepared |= prepared;
    c->prepared = 0;
    c->evictions_prepared += prepared;
    c->stall_ms += ev_evict_stall_ms(ev);
    graph_push(&c->history, c->n_cells, prepared ? 'P' : 'E');
    if (prepared) /* what was done ahead, what the swap still recomputed, what it waited */
        cmi_log(m, c->id, 'e', 0,
                "conv %d evicted %d tok; %d re-prefilled ahead in %s, %d then; "
                "waited %s",
                c->id, ev_evict_dropped(ev), ahead_tok, fmt_ms(a, sizeof a, ahead), then,
                fmt_ms(b, sizeof b, ev_evict_stall_ms(ev)));
    else
        cmi_log(m, c->id, 'e', 0, "conv %d evicted %d tok; %d re-prefilled in %s%s", c->id,
                ev_evict_dropped(ev), ev_evict_recomputed(ev), fmt_ms(a, sizeof a, ev_evict_ms(ev)),
                c->approximate ? " (approx)" : "");
}

static void on_prepare(cache_model *m, cm_conv *c, const json_t *ev)
{
    char a[32];
    if (ev_prepare_longer(ev)) {
        cmi_log(m, c->id, 0, 0, "conv %d a longer message's eviction %s: %d tok %s", c->id,
                ev_prepare_ready(ev) ? "prepared too" : "begun", ev_prepare_tokens(ev),
                fmt_ms(a, sizeof a, ev_prepare_ms(ev)));
        return;
    }
    int ready = ev_prepare_ready(ev);
    c->prepared = ready ? ev_prepare_tokens(ev) > 0 ? ev_prepare_tokens(ev) : 1 : 0;
    c->prepared_ms = ready ? ev_prepare_ms(ev) : 0;
    c->prepared_tokens = ready ? clamp_int(ev_prepare_tokens(ev), 0, CM_MAX_CELLS) : 0;
    cmi_log(m, c->id, 0, 0, "conv %d next eviction %s: %d tok %s", c->id,
            ready ? "prepared" : "not prepared", ev_prepare_tokens(ev),
            fmt_ms(a, sizeof a, ev_prepare_ms(ev)));
}

/* The engine's turns as a turn's end records them ([start, length, role, pinned] each), in place
 * of the panel's where they differ: one numbering everywhere (the map's digits are /pin's), even
 * where the events alone leave it open (a reply of no tokens, which opens no turn here). Each turn
 * keeps the reading of the panel's turn that held its start. */
static void adopt_turns(cm_conv *c, const json_t *turns, int n_window)
{
    int n = (int)json_array_size(turns), same = n == c->n_turns, at = 0;
    for (int t = 0; same && t < n; t++) {
        const json_t *x = json_array_get(turns, (size_t)t);
        same = json_integer_value(json_array_get(x, 0)) == c->turns[t].start &&
               json_integer_value(json_array_get(x, 1)) == c->turns[t].len;
    }
    if (same || n < 1 || n_window > CM_MAX_CELLS)
        return;
    win_turn *old = malloc(sizeof *old * ((size_t)c->n_turns + 1));
    cm_read *old_reads = malloc(sizeof *old_reads * ((size_t)c->n_turns + 1));
    int n_old = c->n_turns;
    if (!old || !old_reads)
        goto out;
    memcpy(old, c->turns, sizeof *old * (size_t)n_old);
    memcpy(old_reads, c->reads, sizeof *old_reads * (size_t)n_old);
    c->n_turns = 0;
    c->n_cells = n_window;
    for (int t = 0; t < n; t++) {
        const json_t *x = json_array_get(turns, (size_t)t);
        int start = clamp_int(cmi_cells(json_integer_value(json_array_get(x, 0))), at, n_window);
        int len =
            clamp_int(cmi_cells(json_integer_value(json_array_get(x, 1))), 0, n_window - start);
        int role = clamp_int(cmi_cells(json_integer_value(json_array_get(x, 2))), ROLE_PREAMBLE,
                             ROLE_NOTICE);
        if (add_turn(c, role))
            break;
        win_turn *w = &c->turns[c->n_turns - 1];
        w->start = start;
        w->len = len;
        w->pinned = json_is_true(json_array_get(x, 3));
        for (int o = 0; o < n_old; o++)
            if (start >= old[o].start && start < old[o].start + old[o].len) {
                w->read = old[o].read;
                c->reads[c->n_turns - 1] = old_reads[o];
            }
        at = start + len;
    }
out:
    free(old);
    free(old_reads);
}

static void on_turn_end(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    c->replying = 0;
    adopt_turns(c, ev_turn_end_turns(ev), (int)json_array_size(ev_turn_end_window(ev)));
    /* the reading least-read evicts by, for the forecast: each recorded turn's onto the
     * panel's turn that holds its start */
    const json_t *reads = ev_turn_end_reads(ev), *turns = ev_turn_end_turns(ev);
    for (size_t k = 0; reads && k < json_array_size(turns); k++) {
        const json_t *x = json_array_get(turns, k);
        int start = cmi_cells(json_integer_value(json_array_get(x, 0)));
        for (int t = 0; json_integer_value(json_array_get(x, 1)) > 0 && t < c->n_turns; t++)
            if (start >= c->turns[t].start && start < c->turns[t].start + c->turns[t].len)
                c->turns[t].read =
                    (float)clamp_dbl(json_number_value(json_array_get(reads, k)), 0, 1);
    }
}

static void on_attention(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    apply_reading(c, ev);
}

static void on_pin(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    int t = ev_pin_turn(ev);
    if (t >= 0 && t < c->n_turns)
        c->turns[t].pinned = ev_pin_pinned(ev);
}

static void on_fidelity(cache_model *m, cm_conv *c, const json_t *ev)
{
    (void)m;
    c->has_fidelity = 1;
    c->fid_top1 = ev_fidelity_top1(ev);
    c->fid_kl = ev_fidelity_kl(ev);
    c->fid_rate = ev_fidelity_agree_rate(ev);
}

static void on_notice(cache_model *m, cm_conv *c, const json_t *ev)
{
    cmi_log(m, c->id, 0, 0, "conv %d: %s", c->id, ev_notice_text(ev) ?: "");
}

/* what each event does to the panel's model, as htop binds its keys: one handler a kind */
typedef void (*cm_on)(cache_model *m, cm_conv *c, const json_t *ev);
static const cm_on ON[EVK_COUNT] = {
    [EVK_NEW] = on_new,
    [EVK_USER] = on_turn_start,
    [EVK_RETRY] = on_turn_start,
    [EVK_EDIT] = on_turn_start,
    [EVK_PREFILL] = on_prefill,
    [EVK_TOKEN] = on_token,
    [EVK_TRUNCATE] = on_truncate,
    [EVK_EVICT] = on_evict,
    [EVK_PREPARE] = on_prepare,
    [EVK_GROW] = cm_on_grow,
    [EVK_COW] = cm_on_cow,
    [EVK_SHARE] = cm_on_share,
    [EVK_OFFLOAD] = cm_on_offload,
    [EVK_RESTORE] = cm_on_restore,
    [EVK_FORK] = cm_on_fork,
    [EVK_TURN_END] = on_turn_end,
    [EVK_ATTENTION] = on_attention,
    [EVK_PIN] = on_pin,
    [EVK_FIDELITY] = on_fidelity,
    [EVK_NOTICE] = on_notice,
    [EVK_STATS] = cm_on_stats,
};

void cm_apply(cache_model *m, const json_t *ev)
{
    ev_kind k = ev_kind_of(ev);
    if (k == EVK_MODEL)
        on_model(m, ev);
    if (k == EVK_NONE || k == EVK_MODEL)
        return;
    double when = ev_t(ev);
    if (k == EVK_RESUME && when >= 0 && when < 1e12) { /* a resumed session's clock starts again */
        for (int i = 0; i < m->n_convs; i++)
            m->convs[i].last_t += when - m->now;
        m->now = when;
    }
    cm_tick(m, when);
    if (ev_conv(ev) < 1) /* a setting of the chat's (set, system, resume): no conversation's */
        return;
    cm_conv *c = conv_for(m, ev_conv(ev));
    if (!c)
        return;
    /* used: by its own turns, not by another's fork of it or an idle offload */
    if (k != EVK_SHARE && k != EVK_OFFLOAD && when > 0 && when < 1e12)
        c->last_t = when;
    const json_t *t = json_object_get(ev, "cache");
    if (ev_cache_draft(t)) /* the drafter's own figures are its panel line's */
        apply_pool_totals(m, t);
    if (cm_draft_apply(&c->draft, ev))
        return;
    if (ON[k])
        ON[k](m, c, ev);
}

void cm_tick(cache_model *m, double now)
{
    if (now > m->now && now < 1e12)
        m->now = now;
}
