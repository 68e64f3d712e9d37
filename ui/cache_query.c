/* What the panel and the chat pane ask of the cache model: the next eviction's preview, the share of
 * the reading it drops, a turn's summary line. */
#include <stdio.h>

#include "../kernels/clamp.h"
#include "../model/events.h"
#include "cache_model.h"
#include "format.h"

double cm_read_share(const cm_conv *c, const unsigned char *drop)
{
    double share = 0;
    for (int t = 0; c->have_read && t < c->n_turns; t++) {
        const win_turn *tu = &c->turns[t];
        int gone = 0;
        for (int p = tu->start; p < tu->start + tu->len && p < c->n_cells; p++)
            gone += drop[p] != 0;
        share += tu->len ? c->reads[t].mean * gone / tu->len : 0;
    }
    return share;
}

int cm_tokens(const cm_conv *c) { return c->refilling ? c->refilled : c->n_cells; }

int cm_preview(const cm_conv *c, unsigned char *drop, int *tokens_left, double *turns_left)
{
    /* as the engine will (model/window.c): --evict-at turn makes a turn's room at its start, for
     * the longest message in the window and a reply, where it can; else, and inside a reply, when
     * a token does not fit */
    int need = c->reply_room && !c->replying ? win_turn_need(c->turns, c->n_turns, c->n_cells,
                                                             c->keep, c->window, 0, c->reply_room)
                                             : c->n_cells - c->window;
    *tokens_left = c->refilling ? 0 : clamp_int(-need, 0, CM_MAX_CELLS);
    *turns_left = c->avg_turn_tokens > 0 && !c->replying ? *tokens_left / c->avg_turn_tokens : 0;
    if (!c->window || !c->n_cells || c->refilling)
        return 0;
    /* at least evict_min, oldest turns first; inside a reply, its own tokens last */
    int n = win_plan(c->turns, c->n_turns, c->n_cells, c->keep, need > 1 ? need : 1, c->evict_min,
                     c->replying, c->policy, drop);
    return n < 0 ? 0 : n;
}

int cm_turn_summary(cache_model *m, const json_t *ev, char *buf, size_t n)
{
    const cm_conv *c = ev_kind_of(ev) == EVK_TURN_END && !ev_turn_end_failed(ev)
                           ? cm_conv_get(m, ev_conv(ev))
                           : NULL;
    if (!c)
        return 0;
    char a[32], b[48], r[48], t[32], w[32], e[160] = "", d[96] = "";
    const cm_draft *dr = &c->draft;
    if (dr->turn_rounds) /* --draft: what the drafts came to in this reply */
        snprintf(d, sizeof d, " · drafts %ld of %ld kept (%.0f%%), %.2f tok a pass",
                 dr->turn_accepted, dr->turn_drafted,
                 dr->turn_drafted ? 100.0 * dr->turn_accepted / dr->turn_drafted : 0.0,
                 (double)dr->turn_made / dr->turn_rounds);
    if (c->turn_prepared) /* the re-prefill was done while the user typed: what the reply waited */
        snprintf(e, sizeof e,
                 " · evicted %d tok; %d re-prefilled ahead in %s, %d then; the reply waited %s",
                 c->turn_dropped, c->turn_ahead_tokens, fmt_ms(t, sizeof t, c->turn_ahead_ms),
                 c->turn_recomputed > c->turn_ahead_tokens
                     ? c->turn_recomputed - c->turn_ahead_tokens
                     : 0,
                 fmt_ms(w, sizeof w, c->evict_ms));
    else if (c->turn_dropped || c->turn_recomputed)
        snprintf(e, sizeof e, " · evicted %d tok; %d re-prefilled in %s", c->turn_dropped,
                 c->turn_recomputed, fmt_ms(t, sizeof t, c->evict_ms));
    if (c->prefill_tokens >= FMT_RATE_MIN_TOKENS)
        snprintf(b, sizeof b, "prompt %d tok in %s (%s)", c->prefill_tokens,
                 fmt_ms(a, sizeof a, c->prefill_ms), fmt_rate(r, sizeof r, c->prefill_tok_s));
    else
        snprintf(b, sizeof b, "prompt %d tok in %s", c->prefill_tokens,
                 fmt_ms(a, sizeof a, c->prefill_ms));
    if (c->decode_tokens >= FMT_RATE_MIN_TOKENS)
        snprintf(r, sizeof r, "%d tok at %s", c->decode_tokens,
                 fmt_rate(a, sizeof a, c->decode_tok_s));
    else
        fmt_speed(r, sizeof r, c->decode_tokens, c->decode_ms);
    snprintf(buf, n, "%s · reply %s · TTFT %s%s%s", b, r, fmt_ms(t, sizeof t, c->ttft_ms), d, e);
    return 1;
}
