/* What replay --verify redoes of the chat's commands (the table in actions.c names them): a
 * command's event, back through the engine with the values it recorded. */
#include "redo.h"

#include "../kernels/err.h"
#include "../model/events.h"
#include "chat/records.h"

static int recreated(const json_t *ev, int made)
{
    return made == ev_conv(ev) ? 1
                               : err_set("conversation %d cannot be recreated in the recorded "
                                         "order",
                                         ev_conv(ev));
}

int act_redo_new(engine *e, const json_t *ev) { return recreated(ev, engine_new_conv(e)); }

int act_redo_fork(engine *e, const json_t *ev)
{
    /* the cache manager's fork event, or a drafter's cache forked with its conversation; /fork's
     * names the conversation forked */
    return ev_fork_made_conv(ev) ? recreated(ev, engine_fork(e, ev_fork_parent(ev))) : 0;
}

int act_redo_set(engine *e, const json_t *ev)
{
    sampler_params sp;
    int n_predict;
    rec_sampling_read(ev, &sp, &n_predict);
    engine_set_sampling(e, &sp, n_predict);
    return 1;
}

/* the three below as the live chat did them: a refusal there was recorded as no change */
int act_redo_pin(engine *e, const json_t *ev)
{
    engine_pin(e, ev_conv(ev), ev_pin_turn(ev), ev_pin_pinned(ev));
    return 1;
}

int act_redo_clear(engine *e, const json_t *ev)
{
    engine_clear(e, ev_conv(ev));
    return 1;
}

int act_redo_system(engine *e, const json_t *ev)
{
    engine_set_system(e, ev_system_text(ev));
    return 1;
}
