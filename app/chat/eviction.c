#include "eviction.h"

#include <stdlib.h>

#include "../../kernels/err.h"
#include "conv.h"

/* An eviction inside a reply at --evict-at turn recomputes what follows its first dropped position
 * this many positions at a time, prepared or not: a plan that follows the reply makes a chunk per
 * token (one more pass over the weights: one or two tokens' time on a CPU), and leaves less than
 * one for the swap. */
enum { REPLY_CHUNK = 4 };
/* An eviction at a turn's start that drops more than the one made for the window's longest
 * message (a longer message came) recomputes in chunks of this many, prepared or not: the plan for
 * such a message, made after the first while the user types, stops between chunks when the message
 * comes and keeps what it made. 32 rows a pass keep the GEMMs near a whole pass's speed. */
enum { PLAN_CHUNK = 32 };

/* A prepared eviction: what evict() would compute, done while the user typed (or, following a
 * reply, while it streams). */
struct prep {
    kv_seq *seq;         /* the window after it: the kept prefix shared, the rest recomputed */
    kv_seq *draft;       /* the same window in a model drafter's cache (draft_prepare), or NULL */
    unsigned char *drop; /* its plan over the settled window (following: the window at the reply) */
    int n, kept;         /* that window's length, and the positions it keeps */
    int *ids, *newpos;   /* following a reply: the window after it as it grows, where each goes */
    int first;           /* following: the first position it drops */
    double ms;           /* the time it took ahead */
    struct prep *next;   /* between turns: the plan for a longer message, made after this one */
};

/* The rule's plan for `need` more tokens in c's window: drop[0..n) marks what goes, newpos[i] is
 * where position i goes (newpos[n]: the positions kept), *first the first dropped one. Dropped, or
 * -1. */
static int plan(const conv *c, const evict_rule *r, int need, int open_last, unsigned char *drop,
                int *newpos, int *first)
{
    int n = c->n_ids, w = 0;
    int dropped =
        win_plan(c->turns, c->n_turns, n, c->keep, need, r->target, open_last, r->policy, drop);
    if (dropped < 0)
        return -1;
    for (*first = 0; *first < n && !drop[*first];)
        ++*first;
    for (int i = 0; i < n; i++) {
        newpos[i] = w;
        w += !drop[i];
    }
    newpos[n] = w;
    return dropped;
}

static void free_prep(struct prep *p)
{
    if (p) {
        free_prep(p->next);
        kv_seq_free(p->seq);
        kv_seq_free(p->draft);
        free(p->drop);
        free(p->ids);
        free(p->newpos);
        free(p);
    }
}

void evict_discard(conv *c)
{
    free_prep(c->plan);
    c->plan = NULL;
}

/* whether p is the plan just made for c's window (made from the window as it is settled now, the
 * same drops over it, none after it). Whatever else changes the window drops the plan (a rollback)
 * or the drops (a pin). */
static int plan_is(const struct prep *p, const conv *c, const unsigned char *drop, int n,
                   int following)
{
    int ok = !p->ids == !following && (following || p->n == c->settled) && p->n <= n;
    for (int i = 0; ok && i < n; i++)
        ok = drop[i] == (i < p->n ? p->drop[i] : 0);
    return ok;
}

/* the plan c holds for this eviction, taken, or NULL; every other plan is discarded */
static struct prep *take_plan(conv *c, const unsigned char *drop, int n, int following)
{
    struct prep *found = NULL;
    for (struct prep **p = &c->plan; *p && !found;)
        if (plan_is(*p, c, drop, n, following)) {
            found = *p;
            *p = found->next;
            found->next = NULL;
        } else
            p = &(*p)->next;
    evict_discard(c);
    return found;
}

/* Positions [at, w) of a window onto s, which holds those before: `chunk` at a time from `from` */
static int recompute_chunks(loaded_model *lm, kv_seq *s, const int *ids, int at, int from, int w,
                            int chunk)
{
    int rc = 0;
    while (!rc && at < w) {
        int end = from + ((at - from) / chunk + 1) * chunk;
        end = end < w ? end : w;
        rc = gpt2_forward(&lm->model, lm->backend, s, ids + at, end - at, NULL);
        at = end;
    }
    return rc;
}

/* At a turn's start, at --evict-at turn: what the eviction made for a message as long as the
 * longest in the window drops (evict_prepare's first plan), 0 when that one needs none. win_plan
 * drops a superset for a larger need, so an eviction dropping no more is that one, and one
 * dropping more is for a longer message. */
static int planned_drop(const conv *c, const evict_rule *r, int reply, unsigned char *scratch)
{
    int need = win_turn_need(c->turns, c->n_turns, c->n_ids, c->keep, r->window,
                             win_longest_message(c->turns, c->n_turns), reply);
    int dropped = need > 0 ? win_plan(c->turns, c->n_turns, c->n_ids, c->keep, need, r->target, 0,
                                      r->policy, scratch)
                           : 0;
    return dropped > 0 ? dropped : 0;
}

/* Evicts by the window rule (model/window.c). Exact mode recomputes everything after the first
 * dropped position at its new position, in two passes: what survives of the settled window (as it
 * was when the last turn ended), then what came after it; in chunks instead inside a reply at
 * --evict-at turn (REPLY_CHUNK, all of it), and at a turn's start dropping more than the plan for
 * the longest message (PLAN_CHUNK, the first pass). A prepared eviction made the first pass, or
 * some of its chunks, already (evict_prepare, while the user typed; evict_follow, while the reply
 * streamed), so it swaps in and makes the rest: the same passes on the same rows, the same bits
 * either way, whether or not there was time to prepare (so a replay verifies). Shift mode moves the
 * cached rows down without recomputing (approximate). `reply`: as evict_make_room's. */
static int evict(conv *c, loaded_model *lm, const evict_rule *r, int need, int reply, int open_last)
{
    double t0 = ev_clock();
    int n = c->n_ids, first = 0;
    unsigned char *drop = err_malloc((size_t)n + 1, "an eviction's plan");
    int *newpos = drop ? err_malloc(sizeof(int) * (size_t)(n + 1), "an eviction's plan") : NULL;
    int *spans = newpos ? err_malloc(sizeof(int) * (size_t)(n + 2), "an eviction's plan") : NULL;
    if (!spans) {
        free(drop);
        free(newpos);
        return -1;
    }
    int planned =
        r->when == WIN_AT_TURN && reply > 0 && !open_last ? planned_drop(c, r, reply, drop) : -1;
    int dropped = plan(c, r, need, open_last, drop, newpos, &first);
    if (dropped < 0) {
        free(drop);
        free(newpos);
        free(spans);
        return err_set("cannot make room in a window of %d: the kept prefix and pinned turns fill "
                       "it (/unpin some)",
                       r->window);
    }
    int nt = 0, w = newpos[n], split = newpos[c->settled < n ? c->settled : n];
    int chunked = r->when == WIN_AT_TURN && open_last;
    int longer = planned >= 0 && dropped > planned;
    struct prep *prepared = r->mode == EVICT_EXACT ? take_plan(c, drop, n, chunked) : NULL;
    int swapped = prepared != NULL, ahead = 0;
    double ahead_ms = 0;
    for (int t = 0; t < c->n_turns; t++) {
        win_turn tu = c->turns[t];
        int kept = 0, start = newpos[tu.start + tu.len];
        for (int i = tu.start + tu.len - 1; i >= tu.start; i--)
            if (!drop[i])
                kept++, start = newpos[i];
        /* a turn dropped whole goes, but for the reply still growing (open_last): the turn its
         * next tokens join */
        if (kept || (open_last && t == c->n_turns - 1)) {
            tu.start = start;
            tu.len = kept;
            c->turns[nt++] = tu;
        } else if (tu.no > c->gone_no)
            c->gone_no = tu.no;
    }
    c->n_turns = nt;
    int n_spans = 0; /* [start, length] of each dropped run */
    for (int i = 0; i < n;) {
        if (!drop[i]) {
            c->ids[newpos[i]] = c->ids[i];
            i++;
            continue;
        }
        int s0 = i;
        while (i < n && drop[i])
            i++;
        spans[2 * n_spans] = s0, spans[2 * n_spans + 1] = i - s0, n_spans++;
    }
    c->n_ids = w;
    c->settled = split;
    int recomputed = 0, rc = 0, from = split > first ? split : first;
    if (r->mode == EVICT_EXACT) {
        recomputed = w - first;
        if (prepared) {
            kv_seq_free(c->seq);
            c->seq = prepared->seq;
            prepared->seq = NULL;
            kv_adopt(c->seq);
            kv_set_busy(c->seq, 1); /* evictions happen in turns, whose cache is busy */
            ahead = kv_len(c->seq) - first;
            ahead_ms = prepared->ms;
        } else
            rc = kv_truncate(c->seq, first);
        int at = kv_len(c->seq);
        if (!rc && chunked)
            rc = recompute_chunks(lm, c->seq, c->ids, at, first, w, REPLY_CHUNK);
        else {
            if (!rc && longer)
                rc = recompute_chunks(lm, c->seq, c->ids, at, first, from, PLAN_CHUNK);
            else if (!rc && from > at)
                rc = gpt2_forward(&lm->model, lm->backend, c->seq, c->ids + at, from - at, NULL);
            if (!rc && w > from)
                rc = gpt2_forward(&lm->model, lm->backend, c->seq, c->ids + from, w - from, NULL);
        }
        /* the drafter's cache too, here, so that its wait is the eviction's (counted in its ms) */
        if (!rc && c->draft)
            rc = draft_catch_up(c->draft, c->ids, w, prepared ? prepared->draft : NULL);
        if (prepared)
            prepared->draft = NULL;
    } else {
        for (int i = first;
             i < n && !rc;) { /* every surviving run after `first` moves down, in order */
            if (drop[i]) {
                i++;
                continue;
            }
            int s0 = i;
            while (i < n && !drop[i])
                i++;
            rc = kv_shift(c->seq, newpos[s0], s0, i - s0);
        }
        if (!rc)
            rc = kv_truncate(c->seq, w);
        c->approximate = 1;
    }
    free_prep(prepared);
    free(drop);
    free(newpos);
    if (rc) {
        free(spans);
        return err_wrap("eviction");
    }
    c->evictions++;
    double ms = (ev_clock() - t0) * 1e3;
    ev_emit_evict(
        lm->bus, c->id,
        &(ev_evict){
            EV_OPT(keep, first), EV_OPT(dropped, dropped), EV_OPT(recomputed, recomputed),
            EV_OPT(ms, ms), EV_OPT(mode, r->mode == EVICT_EXACT ? "exact" : "shift (approximate)"),
            .ranges = spans, .n_ranges = n_spans, EV_OPT(prepared, swapped), EV_OPT(stall_ms, ms),
            .ahead = ahead, .has_ahead = swapped, .ahead_ms = ahead_ms, .has_ahead_ms = swapped,
            EV_OPT(cache, kv_totals(c->seq))});
    free(spans);
    return 0;
}

int evict_make_room(conv *c, loaded_model *lm, const evict_rule *r, int n, int reply, int open_last)
{
    int need = win_turn_need(c->turns, c->n_turns, c->n_ids, c->keep, r->window, n, reply);
    return need > 0 ? evict(c, lm, r, need, reply, open_last) : 0;
}

/* The eviction the next turn's start will make for a message as long as the longest in the window
 * (window.c's rule: then the plan holds for any message no longer), or, at --evict-at full, the
 * first the next turn may make, for a message or a reply token: short of a message longer than
 * the rule's target, the target decides what it drops. <= 0: none is coming. */
static int next_need(const conv *c, const evict_rule *r, int n_predict)
{
    int longest = win_longest_message(c->turns, c->n_turns),
        reply = win_reply_room(r->when, n_predict);
    if (reply)
        return win_turn_need(c->turns, c->n_turns, c->n_ids, c->keep, r->window, longest, reply);
    int over = c->n_ids + (longest ? longest : 64) + n_predict - r->window; /* 64: no message yet */
    return over < r->target ? over : r->target;
}

/* One plan, for `need` more tokens, onto *to: the first pass of that eviction on a background fork,
 * whole (chunk 0; a message coming first discards it) or `chunk` at a time (a message coming first
 * keeps the chunks made: the eviction makes the rest). Emits prepare. 0, 1 when a message came
 * first, or -1 (on a failure to allocate, with no plan). */
static int prepare_one(conv *c, loaded_model *lm, const evict_rule *r, int need, int chunk,
                       const atomic_int *stop, struct prep **to)
{
    double t0 = ev_clock();
    int n = c->n_ids, first = 0, rc = -1;
    struct prep *p = err_calloc(1, sizeof *p, "a prepared eviction");
    int *newpos = err_malloc(sizeof(int) * (size_t)(n + 1), "a prepared eviction");
    int *ids = err_malloc(sizeof(int) * (size_t)(n + 1), "a prepared eviction");
    if (p && newpos && ids && (p->drop = err_malloc((size_t)n + 1, "a prepared eviction"))) {
        if (plan(c, r, need, 0, p->drop, newpos, &first) < 0) { /* the turn says what is pinned */
            free_prep(p);
            free(newpos);
            free(ids);
            return 0;
        }
        p->n = n;
        p->kept = newpos[n];
        for (int i = 0; i < n; i++)
            if (!p->drop[i])
                ids[newpos[i]] = c->ids[i];
        rc = (p->seq = kv_fork_background(c->seq, first)) ? 0 : -1;
        int at = first;
        while (!rc && at < p->kept) {
            int end = chunk && at + chunk < p->kept ? at + chunk : p->kept;
            rc = gpt2_forward_yielding(&lm->model, lm->backend, p->seq, ids + at, end - at, stop);
            at = rc ? at : end;
        }
        /* a model drafter's cache of the same window, whole or not at all (the eviction then
         * catches it up itself) */
        if (!rc && c->draft)
            p->draft = draft_prepare(c->draft, ids, p->kept, stop);
    }
    int made = p && p->seq ? kv_len(p->seq) - first : 0;
    if (p)
        p->ms = (ev_clock() - t0) * 1e3;
    ev_emit_prepare(lm->bus, c->id,
                    &(ev_prepare){EV_OPT(tokens, made), EV_OPT(ms, p ? p->ms : 0.0),
                                  EV_OPT(ready, rc == 0), .has_why = rc != 0,
                                  .why = rc > 0 ? "a message came first" : err_msg(), .longer = 1,
                                  .has_longer = chunk != 0});
    if (rc < 0 || (rc > 0 && !chunk))
        free_prep(p);
    else
        *to = p;
    free(newpos);
    free(ids);
    return rc;
}

/* Two plans at most: the eviction the next turn's start makes (next_need), whole; then, at
 * --evict-at turn, the one a longer message would make (one more turn dropped), in chunks, when
 * a message twice the longest would evict. More would hold more memory for rarer messages. */
int evict_prepare(conv *c, loaded_model *lm, const evict_rule *r, int n_predict,
                  const atomic_int *stop)
{
    evict_discard(c);
    int n = c->n_ids, need = next_need(c, r, n_predict), rc = 0;
    int reply = win_reply_room(r->when, n_predict),
        longest = win_longest_message(c->turns, c->n_turns);
    if (r->mode != EVICT_EXACT || c->settled != n)
        return 0;
    if (need > 0 && (rc = prepare_one(c, lm, r, need, 0, stop, &c->plan)))
        return rc < 0 ? -1 : 0;
    if (need > 0 && !c->plan)
        return 0; /* the kept prefix and pinned turns leave too little: the turn will say so */
    int dropped = c->plan ? c->plan->n - c->plan->kept : 0;
    if (!reply || !longest || atomic_load(stop) ||
        (!dropped &&
         win_turn_need(c->turns, c->n_turns, n, c->keep, r->window, 2 * longest, reply) <= 0))
        return 0;
    return prepare_one(c, lm, r, dropped + 1, PLAN_CHUNK, stop,
                       c->plan ? &c->plan->next : &c->plan) < 0
               ? -1
               : 0;
}

/* whether the pool can spare k more positions for c's plan and still let c grow to its window */
static int plan_fits(const conv *c, loaded_model *lm, const evict_rule *r, int k)
{
    kv_pool_stats ps;
    kv_pool_get_stats(lm->pool, &ps);
    size_t left = ps.pool_bytes > ps.used_bytes ? ps.pool_bytes - ps.used_bytes : 0;
    return left >= kv_growth_bytes(c->seq, r->window) +
                       kv_growth_bytes(c->plan->seq, kv_len(c->plan->seq) + k);
}

void evict_follow_begin(conv *c, const evict_rule *r, int n_predict)
{
    int n = c->n_ids, W = r->window, first = 0;
    if (r->when != WIN_AT_TURN)
        return;
    evict_discard(c); /* made for a turn's start: inside a reply an eviction is made in chunks */
    if (r->mode != EVICT_EXACT || n + n_predict <= W || n >= W || !c->n_turns)
        return;
    /* the window as the eviction will find it: the reply grown to the window's end (the token
     * after it does not fit), its oldest part dropped too when the turns before it are too few */
    win_turn *t = &c->turns[c->n_turns - 1];
    struct prep *p = err_calloc(1, sizeof *p, "a prepared eviction");
    int ok = p && (p->drop = err_malloc((size_t)W + 1, "a prepared eviction")) &&
             (p->newpos = err_malloc(sizeof(int) * (size_t)(W + 1), "a prepared eviction")) &&
             (p->ids = err_malloc(sizeof(int) * (size_t)W, "a prepared eviction"));
    if (ok) {
        t->len = W - n;
        ok = win_plan(c->turns, c->n_turns, W, c->keep, 1, r->target, 1, r->policy, p->drop) > 0;
        t->len = 0;
    }
    if (ok) {
        for (first = 0; first < W && !p->drop[first];)
            first++;
        for (int i = 0, w = 0; i <= W; i++) {
            p->newpos[i] = w;
            w += i < W && !p->drop[i];
        }
        p->n = W;
        p->first = first;
        for (int i = first; i < n; i++)
            if (!p->drop[i])
                p->ids[p->newpos[i]] = c->ids[i];
        ok = (p->seq = kv_fork_background(c->seq, first)) != NULL;
    }
    if (ok)
        c->plan = p;
    else
        free_prep(p);
}

void evict_follow(conv *c, loaded_model *lm, const evict_rule *r)
{
    struct prep *p = c->plan;
    int q = c->n_ids - 1; /* the newest token's position */
    if (!p || !p->ids || q >= p->n)
        return;
    if (!p->drop[q])
        p->ids[p->newpos[q]] = c->ids[q];
    int have = p->newpos[q + 1], done = kv_len(p->seq);
    int end = p->first + ((done - p->first) / REPLY_CHUNK + 1) * REPLY_CHUNK;
    if (end > have) /* only whole chunks: the last, partial one is the eviction's */
        return;
    double t0 = ev_clock();
    if (!plan_fits(c, lm, r, REPLY_CHUNK) ||
        gpt2_forward(&lm->model, lm->backend, p->seq, p->ids + done, end - done, NULL))
        evict_discard(c); /* then the eviction recomputes as without a plan */
    else                  /* the time it took ahead: the evict event's ahead_ms */
        p->ms += (ev_clock() - t0) * 1e3;
}

void evict_follow_end(conv *c)
{
    if (c->plan && c->plan->ids)
        evict_discard(c); /* made for this reply's window alone */
}
