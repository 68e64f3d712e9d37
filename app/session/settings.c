/* The settings a session's results depend on, as its header and later events set them, and how
 * two sets of them differ: what resume and verify run with. */
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../chat/records.h"
#include "fingerprint.h"
#include "session.h"

/* the weights, cache and chat settings of a header or a resume event */
static int settings_apply(const json_t *j, model_opts *mo, engine_opts *eo)
{
    const json_t *ca = json_object_get(j, "cache"), *ch = json_object_get(j, "chat");
    const char *wt = json_string_value(json_object_get(j, "weights_dtype"));
    mo->wtype_set |= wt != NULL;
    if (wt && (dt_parse(wt, &mo->wtype) || mo->wtype == DT_I8))
        return err_set("the session's weights dtype '%.16s' is unknown", wt);
    const char *layout = ev_cacheset_layout(ca), *dt = ev_cacheset_dtype(ca);
    mo->kv.layout = layout && !strcmp(layout, "contiguous") ? KV_CONTIGUOUS : KV_PAGED;
    if (dt && dt_parse(dt, &mo->kv.type))
        return err_set("the session's cache dtype '%.16s' is unknown", dt);
    mo->kv_type_set |= dt != NULL;
    mo->kv.block_tokens = ev_cacheset_block_tokens(ca);
    mo->kv.window = ev_cacheset_window(ca);
    mo->kv.grow_factor = (float)ev_cacheset_grow_factor(ca);
    mo->kv.prealloc = ev_cacheset_prealloc(ca);
    /* a pool that full failed a turn, so the recorded size is part of the result */
    long long pool = ev_cacheset_pool_bytes(ca);
    if (pool < 0 || pool > SESSION_MAX_POOL)
        return err_set("the session's cache pool size %lld is out of range", (long long)pool);
    mo->kv.pool_bytes = (size_t)pool;
    const char *tpl = ev_chatset_template(ch), *ev = ev_chatset_evict(ch),
               *at = ev_chatset_evict_at(ch);
    if (!tpl || tpl_parse(tpl, &eo->tpl))
        return err_set("the session's template is unknown");
    eo->tpl_why = "as the session was recorded";
    const char *system = ev_chatset_system(ch);
    eo->system = system && *system ? system : NULL; /* lives with the session */
    eo->keep = ev_chatset_keep(ch);
    eo->evict_min = ev_chatset_evict_min(ch);
    if (ev && strcmp(ev, "exact") && strcmp(ev, "shift") && strcmp(ev, "least-read"))
        return err_set("the session's evict '%.16s' is none of exact, shift and least-read", ev);
    eo->evict = ev && !strcmp(ev, "shift") ? EVICT_SHIFT : EVICT_EXACT;
    eo->policy = ev && !strcmp(ev, "least-read") ? WIN_LEAST_READ : WIN_OLDEST;
    if (at && strcmp(at, "turn") && strcmp(at, "full"))
        return err_set("the session's evict_at '%.16s' is neither turn nor full", at);
    /* a session from before --evict-at was recorded evicting when full */
    eo->evict_at = at && !strcmp(at, "turn") ? WIN_AT_TURN : WIN_AT_FULL;
    eo->fidelity = ev_chatset_fidelity(ch);
    const char *draft = ev_chatset_draft(ch);
    draft_opts_default(&eo->draft);
    /* the name lives with the session; a moved drafter: replay --verify --draft says where */
    if (draft && draft_parse_recorded(draft, &eo->draft))
        return err_wrap("the session's draft");
    if (draft) {
        eo->draft.max = ev_chatset_draft_max(ch);
        eo->draft.min_prob = (float)ev_chatset_draft_p_min(ch);
        if (eo->draft.max < 1 || eo->draft.max > DRAFT_MAX_TOKENS || !(eo->draft.min_prob >= 0) ||
            eo->draft.min_prob > 1)
            return err_set("the session's draft settings are out of range");
    }
    /* the sampling settings and the window were checked by the reader (session_parse) */
    if (mo->kv.block_tokens < 1 || mo->kv.block_tokens > KV_MAX_BLOCK_TOKENS || eo->evict_min < 0 ||
        eo->keep < -1 || mo->kv.window < 1 || eo->fidelity < 0)
        return err_set("the session's settings are out of range");
    if (mo->kv.grow_factor < 1.01f || mo->kv.grow_factor > 16)
        mo->kv.grow_factor = 2.0f;
    return 0;
}

int session_draft_same(const session *s, const engine_opts *eo)
{
    const char *want = ev_chatset_draft_fingerprint(json_object_get(s->header, "chat"));
    char fp[17];
    /* a drafter that cannot be read is for its load to name (verify adds how to name another) */
    if (!want || eo->draft.kind != DRAFT_MODEL || fp_model(eo->draft.dir, fp))
        return 0;
    return strcmp(want, fp) ? err_set("the session was recorded with another drafter than %s "
                                      "(its fingerprint was %s, this one's is %s)",
                                      eo->draft.dir, want, fp)
                            : 0;
}

int session_settings_at(const session *s, int upto, model_opts *mo, engine_opts *eo)
{
    rec_sampling_read(json_object_get(s->header, "sampling"), &mo->sp, &mo->n_predict);
    if (settings_apply(s->header, mo, eo))
        return -1;
    for (int i = 0; i < upto && i < s->n_events; i++) {
        const json_t *ev = s->events[i];
        switch (ev_kind_of(ev)) {
            case EVK_SET: rec_sampling_read(ev, &mo->sp, &mo->n_predict); break;
            case EVK_RESUME:
                if (ev_resume_has_cache(ev) && settings_apply(ev, mo, eo))
                    return -1;
                break;
            case EVK_SYSTEM: {
                const char *t = ev_system_text(ev);
                eo->system = t && *t ? t : NULL;
                break;
            }
            default: break;
        }
    }
    return 0;
}

int session_settings_diff(const model_opts *r, const engine_opts *re, const model_opts *m,
                          const engine_opts *e, char *names, size_t n)
{
    const struct {
        int differs;
        const char *name;
    } f[] = {
        {r->n_predict != m->n_predict, "-n"},
        {r->sp.temp != m->sp.temp, "--temp"},
        {r->sp.top_k != m->sp.top_k, "--top-k"},
        {r->sp.top_p != m->sp.top_p, "--top-p"},
        {r->sp.repeat_penalty != m->sp.repeat_penalty, "--repeat-penalty"},
        {r->sp.seed != m->sp.seed, "--seed"},
        {r->kv.window != m->kv.window, "--ctx"},
        {r->kv.pool_bytes != m->kv.pool_bytes, "--cache-mem"},
        {r->kv.layout != m->kv.layout, "--cache-layout"},
        {r->kv.type != m->kv.type, "--cache-dtype"},
        {r->kv.block_tokens != m->kv.block_tokens, "--block-tokens"},
        {r->kv.grow_factor != m->kv.grow_factor, "--grow-factor"},
        {r->kv.prealloc != m->kv.prealloc, "--prealloc"},
        {r->wtype != m->wtype, "--dtype"},
        {re->tpl != e->tpl, "--template"},
        {re->keep != e->keep, "--keep"},
        {re->evict_min != e->evict_min, "--evict-min"},
        {re->evict != e->evict || re->policy != e->policy, "--evict"},
        {re->evict_at != e->evict_at, "--evict-at"},
        {re->fidelity != e->fidelity, "--fidelity"},
        {re->draft.kind != e->draft.kind ||
             (re->draft.kind == DRAFT_MODEL && strcmp(re->draft.dir, e->draft.dir)),
         "--draft"},
        {re->draft.kind != DRAFT_NONE && re->draft.max != e->draft.max, "--draft-max"},
        {re->draft.kind != DRAFT_NONE && re->draft.min_prob != e->draft.min_prob, "--draft-p-min"},
        {!re->system != !e->system || (re->system && strcmp(re->system, e->system)), "--system"},
    };
    int k = 0;
    names[0] = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].differs && strlen(names) + strlen(f[i].name) + 3 < n)
            snprintf(names + strlen(names), n - strlen(names), "%s%s", k++ ? ", " : "", f[i].name);
    return k;
}
