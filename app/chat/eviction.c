#include "eviction.h"

#include <stdlib.h>

#include "../../kernels/err.h"
#include "conv.h"

/* Evicts by the window rule (model/window.c). Exact mode re-prefills everything after the first
 * dropped position at its new position; shift mode moves the cached rows down without recomputing
 * (approximate). */
static int evict(conv *c, loaded_model *lm, const evict_rule *r, int need, int open_last)
{
    double t0 = ev_clock();
    int n = c->n_ids;
    unsigned char *drop = err_malloc((size_t)n + 1, "an eviction's plan");
    int *newpos = drop ? err_malloc(sizeof(int) * (size_t)(n + 1), "an eviction's plan") : NULL;
    if (!newpos) {
        free(drop);
        return -1;
    }
    int dropped = win_plan(c->turns, c->n_turns, n, c->keep, need, r->target, open_last, drop);
    if (dropped < 0) {
        free(drop);
        free(newpos);
        return err_set("cannot make room in a window of %d: the kept prefix and pinned turns fill it (/unpin some)",
                       r->window);
    }
    int first = 0, w = 0;
    while (first < n && !drop[first])
        first++;
    for (int i = 0; i < n; i++) {
        newpos[i] = w;
        w += !drop[i];
    }
    newpos[n] = w;
    int nt = 0;
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
    int recomputed = 0, rc = 0;
    if (r->mode == EVICT_EXACT) {
        recomputed = w - first;
        rc = kv_truncate(c->seq, first);
        if (!rc && recomputed)
            rc = gpt2_forward(&lm->model, lm->backend, c->seq, c->ids + first, recomputed, NULL);
    } else {
        for (int i = first; i < n && !rc;) { /* every surviving run after `first` moves down, in order */
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
    free(drop);
    free(newpos);
    if (rc) {
        json_decref(ranges);
        return err_wrap("eviction");
    }
    c->evictions++;
    ev_emit(lm->bus, c->id, EV_EVICT,
            json_pack("{s:i, s:i, s:i, s:f, s:s, s:o}", "keep", first, "dropped", dropped, "recomputed", recomputed, "ms",
                      (ev_clock() - t0) * 1e3, "mode", r->mode == EVICT_EXACT ? "exact" : "shift (approximate)",
                      "ranges", ranges));
    return 0;
}

int evict_make_room(conv *c, loaded_model *lm, const evict_rule *r, int n, int open_last)
{
    return c->n_ids + n > r->window ? evict(c, lm, r, c->n_ids + n - r->window, open_last) : 0;
}
