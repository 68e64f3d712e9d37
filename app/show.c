/* The chat's /show: the model, the settings, the cache plan, and where the replies of the
 * conversation in view read (its last attention event). */
#include "show.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/backend.h"
#include "../model/events.h"
#include "../ui/format.h"
#include "options.h"
#include "session/persist.h"

/* the conversation's last attention event, as lines of "\n"-led text into buf ("" when none) */
static void reading(act_host *h, char *buf, size_t n)
{
    buf[0] = 0;
    if (!h->events)
        return;
    if (h->events_lock)
        pthread_mutex_lock(h->events_lock);
    const json_t *ev = NULL;
    for (size_t i = json_array_size(h->events); i-- > 0 && !ev;) {
        const json_t *e = json_array_get(h->events, i);
        if (ev_kind_of(e) == EVK_ATTENTION && ev_conv(e) == h->conv)
            ev = json_incref((json_t *)e);
    }
    if (h->events_lock)
        pthread_mutex_unlock(h->events_lock);
    if (!ev)
        return;
    int nt = 0;
    const win_turn *turns = engine_turns(h->e, h->conv, &nt);
    const json_t *spans = ev_attention_spans(ev), *mean = ev_attention_mean(ev),
                 *max = ev_attention_max(ev);
    size_t at = (size_t)snprintf(buf, n,
                                 "\nwhere the replies read (the last %d tokens; the mean over "
                                 "heads and layers, the most one head gave):",
                                 ev_attention_tokens(ev));
    for (size_t i = 0; i < json_array_size(spans) && at < n; i++) {
        const json_t *sp = json_array_get(spans, i);
        int start = (int)json_integer_value(json_array_get(sp, 0)),
            len = (int)json_integer_value(json_array_get(sp, 1)), k = 0, t = 0;
        if (len <= 0)
            continue;
        for (; i && t < nt && start >= turns[t].start + turns[t].len; t++)
            k += turns[t].role != ROLE_PREAMBLE;
        char name[32];
        if (!i)
            snprintf(name, sizeof name, "the kept prefix");
        else if (t < nt && turns[t].role != ROLE_PREAMBLE)
            snprintf(name, sizeof name, "turn %d (%s)", k + 1,
                     turns[t].role == ROLE_USER ? "you" : "gpt-2");
        else
            snprintf(name, sizeof name, "the preamble");
        at += (size_t)snprintf(buf + at, n - at, "\n  %-16s %5d tok  %5.1f%%  %5.1f%%", name, len,
                               100 * json_number_value(json_array_get(mean, i)),
                               100 * json_number_value(json_array_get(max, i)));
    }
    json_decref((json_t *)ev);
}

/* the drafter and what it did so far (its counts once the reply being generated ends), as a
 * "\n"-ended line ("" with --draft off) */
static void drafting(act_host *h, char *buf, size_t n)
{
    const draft_opts *d = &h->eo->draft;
    const spec_stats *st = engine_spec_stats(h->e);
    buf[0] = 0;
    if (d->kind == DRAFT_NONE)
        return;
    int at = snprintf(buf, n, "draft: %s, at most %d tokens a pass", draft_name(d), d->max);
    if (d->kind != DRAFT_LOOKUP)
        at += snprintf(buf + at, n - (size_t)at, ", stopping under p %.2g", d->min_prob);
    if (!st) {
        snprintf(buf + at, n - (size_t)at, ".\n");
        return;
    }
    snprintf(buf + at, n - (size_t)at,
             "; %ld drafted, %ld accepted (%.0f%%; %.0f%% of %ld tested), %.2f tokens a pass over "
             "%ld passes.\n",
             st->drafted, st->accepted, st->drafted ? 100.0 * st->accepted / st->drafted : 0.0,
             st->tested ? 100.0 * st->accepted / st->tested : 0.0, st->tested,
             st->rounds ? (double)st->made / st->rounds : 0.0, st->rounds);
}

act_result act_show(act_host *h, const char *name, char *args)
{
    (void)name, (void)args;
    const model_opts *mo = engine_model_opts(h->e);
    const kv_opts *ko = kv_pool_opts(h->lm->pool);
    const gpt2_config *c = &h->lm->model.cfg;
    const char *sys = engine_system(h->e), *path = h->persist->session_path;
    char buf[8192 + PATH_MAX], a[32], b[32], where[320], read[2048], draft[4400];
    reading(h, read, sizeof read);
    drafting(h, draft, sizeof draft);
    if (kb_fallback_reason()) /* said here (and by info), not on stderr at every start */
        snprintf(where, sizeof where, "cpu (no usable GPU: %s)", kb_fallback_reason());
    else
        snprintf(where, sizeof where, "%s", h->lm->backend->name);
    snprintf(buf, sizeof buf,
             "model %s: %d layers x %d embd, %d heads, context %d, %s weights on %s.\n"
             "sampling: temp %.2g, top-k %d, top-p %.2g, repeat penalty %.2g, seed %llu, "
             "max %d tokens.\n"
             "cache: %s, %s, window %d, %s per token, pool %s, eviction %s, keep %s.\n"
             "template: %s (%s).\n%s%s%s%s"
             "session: %s%s%s%s.%s",
             session_model_name(h->lm), c->n_layer, c->n_embd, c->n_head, c->n_ctx,
             dt_name(h->lm->model.wtype), where, mo->sp.temp, mo->sp.top_k, mo->sp.top_p,
             mo->sp.repeat_penalty, (unsigned long long)mo->sp.seed, mo->n_predict,
             ko->layout == KV_PAGED ? "paged" : "contiguous", dt_name(ko->type), ko->window,
             fmt_bytes(a, sizeof a, (double)kv_bytes_per_token(h->lm->pool)),
             fmt_bytes(b, sizeof b, (double)ko->pool_bytes),
             h->eo->evict == EVICT_SHIFT       ? "shift (approximate)"
             : h->eo->policy == WIN_LEAST_READ ? "exact, the least read first"
                                               : "exact",
             h->eo->keep >= 0 ? "--keep" : "the preamble", tpl_name(h->eo->tpl), h->eo->tpl_why,
             sys ? "system preamble: " : "", sys ? sys : "", sys ? "\n" : "", draft,
             path ? path : "not saved", path ? "" : " (", path ? "" : h->persist->unsaved_why,
             path ? "" : ")", read);
    h->note(h, buf);
    return ACT_DONE;
}
