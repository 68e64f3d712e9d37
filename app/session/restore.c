#include "restore.h"

#include <stdlib.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../chat/records.h"

static int conv_of(const json_t *ev) { return ev_conv(ev); }

/* each conversation's last turn_end and its number of completed turns, indexed by id */
static int restore_convs(engine *e, const session *s, int upto, int max_id, int *order,
                         int *n_order)
{
    int n = 0, rc = 0;
    const json_t **last = calloc((size_t)max_id + 1, sizeof *last);
    int *done = calloc((size_t)max_id + 1, sizeof *done);
    if (!last || !done)
        rc = err_set("out of memory restoring %d conversations", max_id);
    for (int i = 0; i < upto && !rc; i++) {
        int id = conv_of(s->events[i]);
        if (!ev_is(s->events[i], EV_TURN_END))
            continue;
        if (!last[id])
            order[n++] = id;
        last[id] = s->events[i];
        done[id]++;
    }
    *n_order = n;
    for (int k = 0; k < n && !rc; k++) {
        rec_turn_end t;
        int *ids = NULL;
        win_turn *turns = NULL;
        if (rec_turn_end_read(last[order[k]], &t, &ids, &turns) ||
            engine_restore(e, order[k], t.ids, t.n_ids, t.turns, t.n_turns, t.keep, &t.sp, t.rng,
                           t.approximate, done[order[k]]))
            rc = -1;
        free(ids);
        free(turns);
    }
    free(last);
    free(done);
    return rc;
}

int session_restore(engine *e, const session *s, int upto, int **order, int *n)
{
    /* conversation ids are at most SESSION_MAX_CONV (the reader checks): index by id */
    int max_id = 0;
    upto = upto < s->n_events ? upto : s->n_events;
    for (int i = 0; i < upto; i++)
        if (ev_is(s->events[i], EV_TURN_END) && conv_of(s->events[i]) > max_id)
            max_id = conv_of(s->events[i]);
    *order = NULL;
    *n = 0;
    if (!max_id)
        return err_set("the session has no completed turn to resume from");
    if (!(*order = malloc(sizeof(int) * (size_t)(max_id + 1))))
        return err_set("out of memory restoring %d conversations", max_id);
    if (restore_convs(e, s, upto, max_id, *order, n)) {
        free(*order);
        *order = NULL;
        return -1;
    }
    return 0;
}
