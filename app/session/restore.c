#include "restore.h"

#include <stdlib.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../chat/records.h"

/* whether ev made conversation ev_conv(ev): /new, or /fork (the cache manager's own fork event
 * names no parent) */
static int makes_conv(const json_t *ev)
{
    return ev_kind_of(ev) == EVK_NEW || ev_fork_made_conv(ev);
}

/* The turn_end holding conversation id's window before event `at`: its own last one, else, for a
 * fork with none, its parent's before the fork (and so on up); NULL for an empty window (a /new
 * with no turn yet). Walked, not recursed: a session may chain many forks. */
static const json_t *window_before(const session *s, int id, int at)
{
    for (int i = at - 1; i >= 0; i--) {
        const json_t *ev = s->events[i];
        if (ev_conv(ev) != id)
            continue;
        switch (ev_kind_of(ev)) {
            case EVK_TURN_END: return ev;
            case EVK_NEW: return NULL;
            case EVK_FORK: id = ev_fork_made_conv(ev) ? ev_fork_parent(ev) : id; break;
            default: break;
        }
    }
    return NULL;
}

/* conversation id as event `upto` finds it: its own last turn, or what it was made with (a fork's
 * window, a new one's nothing) and a sampler as new as its own (it has not drawn yet) */
static int restore_one(engine *e, const session *s, int upto, int id, int done)
{
    const json_t *end = window_before(s, id, upto);
    rec_turn_end t = {0};
    int *ids = NULL, none = 0, rc = 0;
    win_turn *turns = NULL;
    if (end && rec_turn_end_read(end, &t, &ids, &turns))
        return -1;
    if (!done) {
        sampler fresh;
        t.sp = engine_model_opts(e)->sp;
        sampler_init(&fresh, &t.sp);
        t.rng = fresh.rng;
    }
    rc = engine_restore(e, id, end ? t.ids : &none, end ? t.n_ids : 0, turns, end ? t.n_turns : 0,
                        t.keep, &t.sp, t.rng, t.approximate, done);
    free(ids);
    free(turns);
    return rc;
}

int session_restore(engine *e, const session *s, int upto, int **order, int *n)
{
    upto = upto < s->n_events ? upto : s->n_events;
    /* ids are at most SESSION_MAX_CONV (the reader checks): the conversations made so far,
     * indexed by id, with their completed turns; the one the session last acted in comes last */
    int max_id = 0, last = 0, turns = 0;
    for (int i = 0; i < upto; i++)
        if (ev_kind_of(s->events[i]) == EVK_TURN_END || makes_conv(s->events[i])) {
            last = ev_conv(s->events[i]);
            max_id = last > max_id ? last : max_id;
            turns += ev_kind_of(s->events[i]) == EVK_TURN_END;
        }
    *order = NULL;
    *n = 0;
    if (!turns)
        return err_set("the session has no completed turn to resume from");
    int *done = calloc((size_t)max_id + 1, sizeof *done);
    char *made = calloc((size_t)max_id + 1, 1);
    *order = malloc(sizeof(int) * (size_t)(max_id + 1));
    int rc =
        done && made && *order ? 0 : err_set("out of memory restoring %d conversations", max_id);
    for (int i = 0; i < upto && !rc; i++) {
        const json_t *ev = s->events[i];
        if (ev_kind_of(ev) == EVK_TURN_END ||
            makes_conv(ev)) { /* others may name ids past max_id */
            made[ev_conv(ev)] = 1;
            done[ev_conv(ev)] += ev_kind_of(ev) == EVK_TURN_END;
        }
    }
    for (int id = 1; id <= max_id && !rc; id++)
        if (made[id] && id != last)
            (*order)[(*n)++] = id;
    if (!rc)
        (*order)[(*n)++] = last;
    for (int k = 0; k < *n && !rc; k++)
        rc = restore_one(e, s, upto, (*order)[k], done[(*order)[k]]);
    free(done);
    free(made);
    if (rc) {
        free(*order);
        *order = NULL;
        *n = 0;
    }
    return rc;
}
