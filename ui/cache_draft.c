/* The drafter's side of the panel's model (--draft, cache_model.h's cm_draft): its cache from the
 * events whose totals say draft, so that they never move the conversation's own figures, and its
 * acceptance from the verify events. */
#include <limits.h>

#include "../kernels/clamp.h"
#include "../model/events.h"
#include "cache_model.h"

/* the "cache" block of any event that carries one */
static const json_t *cache_of(const json_t *ev) { return json_object_get(ev, "cache"); }

int cm_draft_apply(cm_draft *d, const json_t *ev)
{
    ev_kind k = ev_kind_of(ev);
    if (k == EVK_VERIFY) {
        long drafted = clamp_int(ev_verify_drafted(ev), 0, 64),
             kept = clamp_int(ev_verify_accepted(ev), 0, (int)drafted);
        d->rounds++;
        d->drafted += drafted;
        d->accepted += kept;
        d->tested += kept + (kept < drafted); /* the first rejected is judged too */
        d->made += kept + 1;
        d->draft_ms += ev_verify_draft_ms(ev);
        d->verify_ms += ev_verify_ms(ev);
        d->turn_rounds++;
        d->turn_drafted += drafted;
        d->turn_accepted += kept;
        d->turn_made += kept + 1;
        d->rejecting = kept < drafted;
        if (ev_verify_has_draft_tokens(ev)) { /* its cache moves between the events of it */
            d->tokens = clamp_int(ev_verify_draft_tokens(ev), 0, CM_MAX_CELLS);
            d->bytes_used = d->tokens * d->bytes_per_token;
        }
        return 1;
    }
    const json_t *t = cache_of(ev);
    if (!t || !ev_cache_draft(t))
        return 0;
    d->cached = 1;
    d->tokens = clamp_int(ev_cache_tokens(t), 0, INT_MAX);
    d->capacity = clamp_int(ev_cache_capacity(t), 0, INT_MAX);
    d->shared_blocks = clamp_int(ev_cache_shared_blocks(t), 0, INT_MAX);
    d->bytes_used = ev_cache_bytes_used(t);
    d->bytes_per_token = ev_cache_bytes_per_token(t);
    d->bytes_reserved = ev_cache_bytes_reserved(t);
    d->host_bytes = ev_cache_host_bytes(t);
    if (k == EVK_OFFLOAD || k == EVK_RESTORE)
        d->offloaded = k == EVK_OFFLOAD;
    return 1;
}

void cm_draft_turn(cm_draft *d)
{
    d->turn_rounds = d->turn_drafted = d->turn_accepted = d->turn_made = 0;
}
