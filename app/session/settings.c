/* The settings a session's results depend on, as its header and later events set them, and how
 * two sets of them differ: what resume and verify run with. */
#include <limits.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../chat/records.h"
#include "fingerprint.h"
#include "session.h"

/* an int field of o, clamped into what an int holds before any check (4294967300 read as 4 was a
 * cast before the range check): out of range, it reads as INT_MIN, which every check refuses */
static int int_field(const json_t *o, const char *key)
{
    json_int_t v = json_integer_value(json_object_get(o, key));
    return v < INT_MIN + 1 || v > INT_MAX ? INT_MIN : (int)v;
}

/* the weights, cache and chat settings of a header or a resume event */
static int settings_apply(const json_t *j, model_opts *mo, engine_opts *eo)
{
    const json_t *ca = json_object_get(j, "cache"), *ch = json_object_get(j, "chat");
    const char *wt = json_string_value(json_object_get(j, "weights_dtype"));
    mo->wtype_set |= wt != NULL;
    if (wt && (dt_parse(wt, &mo->wtype) || mo->wtype == DT_I8))
        return err_set("the session's weights dtype '%.16s' is unknown", wt);
    const char *layout = json_string_value(json_object_get(ca, "layout")),
               *dt = json_string_value(json_object_get(ca, "dtype"));
    mo->kv.layout = layout && !strcmp(layout, "contiguous") ? KV_CONTIGUOUS : KV_PAGED;
    if (dt && dt_parse(dt, &mo->kv.type))
        return err_set("the session's cache dtype '%.16s' is unknown", dt);
    mo->kv_type_set |= dt != NULL;
    mo->kv.block_tokens = int_field(ca, "block_tokens");
    mo->kv.window = int_field(ca, "window");
    mo->kv.grow_factor = (float)json_number_value(json_object_get(ca, "grow_factor"));
    mo->kv.prealloc = json_is_true(json_object_get(ca, "prealloc"));
    /* a pool that full failed a turn, so the recorded size is part of the result */
    json_int_t pool = json_integer_value(json_object_get(ca, "pool_bytes"));
    if (pool < 0 || pool > SESSION_MAX_POOL)
        return err_set("the session's cache pool size %lld is out of range", (long long)pool);
    mo->kv.pool_bytes = (size_t)pool;
    const char *tpl = json_string_value(json_object_get(ch, "template")),
               *ev = json_string_value(json_object_get(ch, "evict")),
               *at = json_string_value(json_object_get(ch, "evict_at"));
    if (!tpl || tpl_parse(tpl, &eo->tpl))
        return err_set("the session's template is unknown");
    eo->tpl_why = "as the session was recorded";
    const char *system = json_string_value(json_object_get(ch, "system"));
    eo->system = system && *system ? system : NULL; /* lives with the session */
    eo->keep = int_field(ch, "keep");
    eo->evict_min = int_field(ch, "evict_min");
    if (ev && strcmp(ev, "exact") && strcmp(ev, "shift") && strcmp(ev, "least-read"))
        return err_set("the session's evict '%.16s' is none of exact, shift and least-read", ev);
    eo->evict = ev && !strcmp(ev, "shift") ? EVICT_SHIFT : EVICT_EXACT;
    eo->policy = ev && !strcmp(ev, "least-read") ? WIN_LEAST_READ : WIN_OLDEST;
    if (at && strcmp(at, "turn") && strcmp(at, "full"))
        return err_set("the session's evict_at '%.16s' is neither turn nor full", at);
    /* a session from before --evict-at was recorded evicting when full */
    eo->evict_at = at && !strcmp(at, "turn") ? WIN_AT_TURN : WIN_AT_FULL;
    eo->fidelity = int_field(ch, "fidelity");
    const char *draft = json_string_value(json_object_get(ch, "draft"));
    draft_opts_default(&eo->draft);
    /* the name lives with the session; a moved drafter: replay --verify --draft says where */
    if (draft && draft_parse_recorded(draft, &eo->draft))
        return err_wrap("the session's draft");
    if (draft) {
        eo->draft.max = int_field(ch, "draft_max");
        eo->draft.min_prob = (float)json_number_value(json_object_get(ch, "draft_p_min"));
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
    const char *want =
        json_string_value(json_object_get(json_object_get(s->header, "chat"), "draft_fingerprint"));
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
