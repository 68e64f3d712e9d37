#include "eviction.h"

#include <stdlib.h>

#include "../../kernels/err.h"
#include "conv.h"

/* A prepared eviction: what evict() would compute, done while the user typed. */
struct prep {
    kv_seq *seq;         /* the window after it: the kept prefix shared, the rest recomputed */
    unsigned char *drop; /* its plan over the settled window */
    int n, kept;         /* the settled window's length, and the positions it keeps */
};

/* The rule's plan for `need` more tokens in c's window: drop[0..n) marks what goes, newpos[i] is
 * where position i goes (newpos[n]: the positions kept), *first the first dropped one. Dropped, or
 * -1. */
static int plan(const conv *c, const evict_rule *r, int need, int open_last, unsigned char *drop,
                int *newpos, int *first)
{
    int n = c->n_ids, w = 0;
    int dropped = win_plan(c->turns, c->n_turns, n, c->keep, need, r->target, open_last, drop);
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
        kv_seq_free(p->seq);
        free(p->drop);
        free(p);
    }
}

void evict_discard(conv *c)
{
    free_prep(c->plan);
    c->plan = NULL;
}

/* the plan c holds, taken when it is the one just made for its window (made from the window as it
 * is settled now, the same drops over it, none after it), else discarded: NULL. Whatever else
 * changes the window drops the plan (a rollback) or the drops (a pin). */
static struct prep *take_plan(conv *c, const unsigned char *drop, int n)
{
    struct prep *p = c->plan;
    c->plan = NULL;
    int ok = p && p->n == c->settled && p->n <= n;
    for (int i = 0; ok && i < n; i++)
        ok = drop[i] == (i < p->n ? p->drop[i] : 0);
    if (!ok)
        free_prep(p);
    return ok ? p : NULL;
}

/* Evicts by the window rule (model/window.c). Exact mode recomputes everything after the first
 * dropped position at its new position, in two passes: what survives of the settled window (as it
 * was when the last turn ended), then what came after it. A prepared eviction (evict_prepare) made
 * the first pass already, so it swaps in and makes the second: the same passes on the same rows,
 * the same bits either way, whether or not the user left time to prepare (so a replay verifies).
 * Shift mode moves the cached rows down without recomputing (approximate). */
static int evict(conv *c, loaded_model *lm, const evict_rule *r, int need, int open_last)
{
    double t0 = ev_clock();
    int n = c->n_ids, first = 0;
    unsigned char *drop = err_malloc((size_t)n + 1, "an eviction's plan");
    int *newpos = drop ? err_malloc(sizeof(int) * (size_t)(n + 1), "an eviction's plan") : NULL;
    if (!newpos) {
        free(drop);
        return -1;
    }
    int dropped = plan(c, r, need, open_last, drop, newpos, &first);
    if (dropped < 0) {
        free(drop);
        free(newpos);
        return err_set("cannot make room in a window of %d: the kept prefix and pinned turns fill "
                       "it (/unpin some)",
                       r->window);
    }
    int nt = 0, w = newpos[n], split = newpos[c->settled < n ? c->settled : n];
    struct prep *prepared = r->mode == EVICT_EXACT ? take_plan(c, drop, n) : NULL;
    int swapped = prepared != NULL;
    for (int t = 0; t < c->n_turns; t++) {
        win_turn tu = c->turns[t];
        int kept = 0, start = newpos[tu.start + tu.len];
        for (int i = tu.start + tu.len - 1; i >= tu.start; i--)
            if (!drop[i])
                kept++, start = newpos[i];
        if (kept || t == c->n_turns - 1) {
            tu.start = start;
            tu.len = kept;
            c->turns[nt++] = tu;
        }
    }
    c->n_turns = nt;
    json_t *ranges = json_array();
    for (int i = 0; i < n;) {
        if (!drop[i]) {
            c->ids[newpos[i]] = c->ids[i];
            i++;
            continue;
        }
        int s0 = i;
        while (i < n && drop[i])
            i++;
        json_array_append_new(ranges, json_pack("[i, i]", s0, i - s0));
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
        } else {
            rc = kv_truncate(c->seq, first);
            if (!rc && from > first)
                rc = gpt2_forward(&lm->model, lm->backend, c->seq, c->ids + first, from - first,
                                  NULL);
        }
        if (!rc && w > from)
            rc = gpt2_forward(&lm->model, lm->backend, c->seq, c->ids + from, w - from, NULL);
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
        json_decref(ranges);
        return err_wrap("eviction");
    }
    c->evictions++;
    double ms = (ev_clock() - t0) * 1e3;
    ev_emit(lm->bus, c->id, EV_EVICT,
            json_pack("{s:i, s:i, s:i, s:f, s:s, s:o, s:b, s:f, s:o}", "keep", first, "dropped",
                      dropped, "recomputed", recomputed, "ms", ms, "mode",
                      r->mode == EVICT_EXACT ? "exact" : "shift (approximate)", "ranges", ranges,
                      "prepared", swapped, "stall_ms", ms, "cache", kv_totals(c->seq)));
    return 0;
}

int evict_make_room(conv *c, loaded_model *lm, const evict_rule *r, int n, int reply, int open_last)
{
    int need = win_turn_need(c->turns, c->n_turns, c->n_ids, c->keep, r->window, n, reply);
    return need > 0 ? evict(c, lm, r, need, open_last) : 0;
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

int evict_prepare(conv *c, loaded_model *lm, const evict_rule *r, int n_predict,
                  const atomic_int *stop)
{
    evict_discard(c);
    int n = c->n_ids, need = next_need(c, r, n_predict), first = 0;
    if (r->mode != EVICT_EXACT || need <= 0 || c->settled != n)
        return 0;
    double t0 = ev_clock();
    struct prep *p = err_calloc(1, sizeof *p, "a prepared eviction");
    int *newpos = err_malloc(sizeof(int) * (size_t)(n + 1), "a prepared eviction");
    int *ids = err_malloc(sizeof(int) * (size_t)(n + 1), "a prepared eviction");
    int rc = -1;
    if (p && newpos && ids && (p->drop = err_malloc((size_t)n + 1, "a prepared eviction"))) {
        if (plan(c, r, need, 0, p->drop, newpos, &first) <
            0) { /* the turn will say what is pinned */
            free_prep(p);
            free(newpos);
            free(ids);
            return 0;
        }
        p->n = n;
        p->kept = newpos[n];
        for (int i = first; i < n; i++)
            if (!p->drop[i])
                ids[newpos[i]] = c->ids[i];
        p->seq = kv_fork_background(c->seq, first);
        rc = !p->seq           ? -1
             : p->kept > first ? gpt2_forward_yielding(&lm->model, lm->backend, p->seq, ids + first,
                                                       p->kept - first, stop)
                               : 0;
    }
    json_t *ev = json_pack("{s:i, s:f, s:b}", "tokens", p && p->kept > first ? p->kept - first : 0,
                           "ms", (ev_clock() - t0) * 1e3, "ready", rc == 0);
    if (rc && ev)
        json_object_set_new(ev, "why", json_string(rc > 0 ? "a message came first" : err_msg()));
    ev_emit(lm->bus, c->id, EV_PREPARE, ev);
    if (rc)
        free_prep(p);
    else
        c->plan = p;
    free(newpos);
    free(ids);
    return rc < 0 ? -1 : 0;
}
