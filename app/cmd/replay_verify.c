/* kvchat replay --verify: the model run again on a session's recorded inputs and settings, turn by
 * turn, its resumes rebuilt as they ran; the first token that differs is named (--dump-logits: the
 * logits every recorded token was taken from, teacher-forced). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "commands.h"
#include "../actions.h"
#include "../chat/engine.h"
#include "../files.h"
#include "../options.h"
#include "../session/fingerprint.h"
#include "../safe_text.h"
#include "../session/session.h"
#include "../session/restore.h"
#include "replay.h"
#include "sessions.h"
#include "../selftest.h"

/* what the re-run produced: its tokens, and how often its cache slid and went to host memory */
typedef struct {
    int *ids, n, cap;
    int evictions, offloads;
    const int *want; /* the recorded reply, while a turn runs: a reply stops where it leaves it */
    int n_want;
    int stop_at; /* a reply Ctrl-C stopped: stopped after as many tokens (0: before the first) */
    engine *e;
    json_t *end; /* the re-run's last turn_end */
} id_list;

static void collect(void *ctx, json_t *ev)
{
    id_list *l = ctx;
    switch (ev_kind_of(ev)) {
        case EVK_EVICT: l->evictions++; return;
        case EVK_OFFLOAD: l->offloads++; return;
        case EVK_TURN_END:
            json_decref(l->end);
            l->end = json_incref(ev);
            return;
        case EVK_PREFILL:
            if (l->want && l->stop_at == 0) /* the reply's loop comes next */
                engine_cancel(l->e);
            return;
        case EVK_TOKEN: break;
        default: return;
    }
    if (l->n == l->cap)
        return;
    l->ids[l->n++] = ev_token_id(ev);
    /* diverged, or longer than recorded: what follows cannot make it reproduce; or as far as
     * the user let it go (the room the turn made is the recorded n's, as it was) */
    if (l->want && (l->n > l->n_want || l->ids[l->n - 1] != l->want[l->n - 1] ||
                    (l->stop_at > 0 && l->n >= l->stop_at)))
        engine_cancel(l->e);
}

static void dump_row(void *ctx, const float *logits, int vocab)
{
    FILE *f = ctx;
    fwrite(logits, sizeof(float), (size_t)vocab, f); /* checked once, when the file is committed */
}

/* a recorded action that is not a turn, redone through the chat's command table */
static int apply_action(engine *e, const json_t *ev, const char *path)
{
    int rc = act_replay(e, ev);
    return rc < 0 ? err_wrap("%s", path) : rc;
}

/* the model and engine a verify runs on, as the session's settings at one point left them */
typedef struct {
    const session *s;
    const char *path;
    int force, argc;
    char **argv;
    model_opts base;   /* the command line's */
    const char *draft; /* --draft: the drafter verify runs with instead of the recorded one */
    model_opts mo;
    engine_opts eo;
    loaded_model lm;
    engine *e;
    id_list got;
} verifier;

/* the settings in force after `upto` events, the command line's model options over them */
static int verify_settings(const verifier *v, int upto, model_opts *mo, engine_opts *eo)
{
    *mo = v->base;
    *eo = (engine_opts){0};
    if (session_settings_at(v->s, upto, mo, eo))
        return err_wrap("%s", v->path);
    for (int i = 1; i < v->argc; i++)
        model_opts_parse(mo, v->argc, v->argv, &i);
    return v->draft && draft_parse(v->draft, &eo->draft) ? -1 : 0;
}

static int verify_open(verifier *v)
{
    char fp[17];
    const char *want =
        json_string_value(json_object_get(json_object_get(v->s->header, "model"), "fingerprint"));
    if (selftest_load(&v->lm, &v->mo) || fp_model(v->lm.dir, fp))
        return -1;
    if (!v->force && (!want || strcmp(want, fp)))
        return err_set("%s was recorded with another model than %s (--force to verify anyway)",
                       v->path, v->lm.dir);
    if (!v->force && !v->draft && session_draft_same(v->s, &v->eo))
        return err_wrap("%s", v->path),
               err_suffix(" (--force to verify anyway; --draft off: a greedy session without it)");
    if (!(v->e = engine_create(&v->lm, &v->mo, &v->eo)))
        return v->eo.draft.kind == DRAFT_MODEL && !v->draft
                   ? err_suffix(" (--draft DIR: where the drafter is now; --draft off: none, "
                                "which changes no greedy reply)")
                   : -1;
    return ev_subscribe(v->lm.bus, collect, &v->got);
}

static void verify_close(verifier *v)
{
    if (v->lm.bus)
        ev_unsubscribe(v->lm.bus, collect, &v->got);
    engine_free(v->e);
    v->e = NULL;
    unload_model(&v->lm);
}

/* At resume event i: a run resumed with other settings than verify's goes on as that run did, from
 * the conversations as the turns before it left them. 1 if so, 0 if nothing changed, -1 on error.
 */
static int verify_resume(verifier *v, int i)
{
    model_opts mo, cur = v->mo;
    engine_opts eo;
    char names[256];
    if (verify_settings(v, i + 1, &mo, &eo))
        return -1;
    cur.sp =
        engine_model_opts(v->e)->sp; /* the sampling is the set events', applied as they came */
    cur.n_predict = engine_model_opts(v->e)->n_predict;
    v->eo.system = eo.system; /* and so is the system text */
    if (!session_settings_diff(&cur, &v->eo, &mo, &eo, names, sizeof names))
        return 0;
    printf("resumed with other settings (%s): the turns after it run with them\n", names);
    verify_close(v);
    v->mo = mo;
    v->eo = eo;
    int *order = NULL, n = 0,
        rc = verify_open(v) || session_restore(v->e, v->s, i, &order, &n) ? -1 : 0;
    for (int k = 0; k < n && !rc; k++)
        rc = engine_prefill_window(v->e, order[k], NULL, NULL);
    free(order);
    return rc ? -1 : 1;
}

static int listed(const json_t *ids, int id)
{
    for (size_t k = 0; k < json_array_size(ids); k++)
        if (json_integer_value(json_array_get(ids, k)) == id)
            return 1;
    return 0;
}

/* At a restored event: the caches made as the resumed run made them. The conversations it
 * prefilled again are prefilled again here in the same passes (their bits are not those of the
 * turns' passes that built them here), and a drafter whose cache it did not load from a snapshot
 * starts empty. A run resumed with other settings has been rebuilt already (verify_resume). */
static int verify_restored(verifier *v, const json_t *ev, int rebuilt)
{
    const json_t *prefilled = ev_restored_prefilled(ev), *drafts = ev_restored_drafts(ev);
    int rc = 0;
    for (int k = 0; k < engine_conv_count(v->e) && !rc && !rebuilt; k++) {
        int id = engine_conv_id(v->e, k), n;
        const int *ids = engine_window(v->e, id, &n);
        drafter *d = engine_drafter(v->e, id);
        if (listed(prefilled, id))
            rc = kv_truncate(engine_conv_cache(v->e, id), 0) ||
                 engine_prefill_window(v->e, id, NULL, NULL);
        if (!rc && d && !listed(drafts, id))
            rc = draft_settle(d, ids, 0);
    }
    return rc ? -1 : 1;
}

/* the end of the turn event `at` begins: its conversation's next turn_end in the same run, or NULL
 * for a turn cut by a crash (the run ended first) */
static const json_t *turn_end_of(const session *s, int at, int conv, const char **text)
{
    int edit = ev_kind_of(s->events[at]) == EVK_EDIT;
    for (int j = at + 1; j < s->n_events; j++) {
        const json_t *ev = s->events[j];
        ev_kind k = ev_kind_of(ev);
        if (k == EVK_RESUME)
            return NULL;
        if (edit && !*text && k == EVK_USER)
            *text = ev_user_text(ev);
        if (k == EVK_TURN_END && ev_conv(ev) == conv)
            return ev;
    }
    return NULL;
}

/* a turn_end's turns but the empty ones (an older kvchat kept a turn an eviction emptied) */
static json_t *nonempty_turns(const json_t *end)
{
    json_t *out = json_array(), *t;
    size_t i;
    json_array_foreach(ev_turn_end_turns(end), i, t)
    {
        if (json_integer_value(json_array_get(t, 1)))
            json_array_append(out, t);
    }
    return out;
}

/* whether two turn_end records leave the same window: its token ids and its turns */
static int same_window(const json_t *a, const json_t *b)
{
    json_t *ta = nonempty_turns(a), *tb = nonempty_turns(b);
    int same = b && json_equal(ev_turn_end_window(a), ev_turn_end_window(b)) && json_equal(ta, tb);
    json_decref(ta);
    json_decref(tb);
    return same;
}

/* the recorded token ids of conversation conv from event at up to end */
static int recorded_ids(const session *s, int at, const json_t *end, int conv, int *ids, int cap)
{
    int n = 0;
    for (int j = at + 1; s->events[j] != end; j++)
        if (ev_kind_of(s->events[j]) == EVK_TOKEN && ev_conv(s->events[j]) == conv && n < cap)
            ids[n++] = ev_token_id(s->events[j]);
    return n;
}

enum { MAX_IDS = 1 << 20 };

/* Re-runs the turn event i begins; *i moves to its end. 0 when it reproduced, 1 when it differs
 * (why says how), -1 on an error. */
static int verify_turn(verifier *v, int *i, int turn, int *want_ids, FILE *dump, char *why,
                       size_t why_n)
{
    const session *s = v->s;
    json_t *ev = s->events[*i];
    /* a user event's text; a retry's and an edit's come from the events after them */
    const char *text = ev_user_text(ev);
    int conv = ev_conv(ev);
    const json_t *end = turn_end_of(s, *i, conv, &text);
    if (!end) {
        printf("turn %d (conv %d): cut (no turn_end: its run ended inside it), not compared\n",
               turn, conv);
        return 0; /* resume took it as never made, and so does verify */
    }
    int cancelled = ev_turn_end_cancelled(end), failed = ev_turn_end_failed(end);
    int n_want = recorded_ids(s, *i, end, conv, want_ids, MAX_IDS);
    v->got.n = 0;
    if (dump)
        engine_force_reply(v->e, want_ids, n_want, dump_row, dump);
    v->got.want = want_ids, v->got.n_want = n_want, v->got.e = v->e;
    v->got.stop_at = cancelled ? n_want : -1; /* stop where the user stopped it */
    char *reply = NULL;
    ev_kind kind = ev_kind_of(ev);
    int r = kind == EVK_USER    ? engine_turn(v->e, conv, text, &reply)
            : kind == EVK_RETRY ? engine_retry(v->e, conv, &reply)
                                : engine_edit(v->e, conv, text ? text : "", &reply);
    free(reply);
    v->got.want = NULL;
    char err[200];
    snprintf(err, sizeof err, "%s", r ? err_msg() : "");
    if (cancelled) {
        const char *rng = ev_turn_end_rng(end);
        if (!r && rng) /* Ctrl-C may have drawn once more than stopping at this length does */
            engine_set_rng(v->e, conv, strtoull(rng, NULL, 16));
    }
    /* past this turn's own events; actions recorded while it ran took effect when it ended */
    while (s->events[*i] != end)
        if (apply_action(v->e, s->events[++*i], v->path) < 0)
            return -1;
    if (failed && r) {
        printf("turn %d (conv %d): failed, as recorded (%s)\n", turn, conv, err);
        return 0;
    }
    if (failed || r) {
        printf("turn %d (conv %d): DIFFERS: recorded a %s, got a %s%s%s%s\n", turn, conv,
               failed ? "failure" : "reply", failed ? "reply" : "failure", r ? " (" : "", err,
               r ? ")" : "");
        snprintf(why, why_n, "turn %d (conv %d) recorded a %s and got a %s", turn, conv,
                 failed ? "failure" : "reply", failed ? "reply" : "failure");
        return 1;
    }
    int k = 0;
    while (k < v->got.n && k < n_want && v->got.ids[k] == want_ids[k])
        k++;
    if (k == v->got.n && k == n_want && !dump && !same_window(end, v->got.end)) {
        /* a window forged, or one a resume would go on from that the session never had (teacher
         * forcing feeds made-up sessions: tests/forced_session.py's record no window) */
        printf("turn %d (conv %d): DIFFERS: the same %d tokens, but the window after it does not "
               "(recorded %zu tokens, got %zu)\n",
               turn, conv, n_want, json_array_size(ev_turn_end_window(end)),
               json_array_size(ev_turn_end_window(v->got.end)));
        snprintf(why, why_n, "turn %d (conv %d) leaves another window", turn, conv);
        return 1;
    }
    if (k == v->got.n && k == n_want) {
        printf("turn %d (conv %d): %d tokens, same\n", turn, conv, n_want);
        return 0;
    }
    printf("turn %d (conv %d): DIFFERS at token %d: recorded %d, got %d\n", turn, conv, k + 1,
           k < n_want ? want_ids[k] : -1, k < v->got.n ? v->got.ids[k] : -1);
    snprintf(why, why_n, "turn %d (conv %d) differs at token %d", turn, conv, k + 1);
    return 1;
}

int replay_verify(const session *s, const char *path, const model_opts *mo, int force,
                  const char *dump_path, const char *draft, int argc, char **argv)
{
    verifier v = {.s = s,
                  .path = path,
                  .force = force,
                  .argc = argc,
                  .argv = argv,
                  .base = *mo,
                  .draft = draft};
    const char *recorded =
        json_string_value(json_object_get(json_object_get(s->header, "model"), "dir"));
    if (!v.base.model_dir && !getenv("KVCHAT_MODEL") && recorded)
        v.base.model_dir = recorded;
    model_opts rec = v.base;
    engine_opts rec_eo = {0};
    char names[256];
    if (session_settings_at(s, 0, &rec, &rec_eo) || verify_settings(&v, 0, &v.mo, &v.eo))
        return err_wrap("%s", path), EXIT_RUNTIME;
    if (session_settings_diff(&rec, &rec_eo, &v.mo, &v.eo, names, sizeof names))
        fprintf(stderr,
                "note: verifying with %s from the command line instead of the recorded settings\n",
                names);
    if (json_integer_value(json_object_get(s->header, "kvchat_session")) < 2)
        fprintf(
            stderr,
            "note: %s was recorded with the sampling rule of an earlier kvchat (session format 1): "
            "sampled turns may differ, greedy ones must match\n",
            path);
    part_file dump = {0};
    int *want_ids = malloc(sizeof(int) * MAX_IDS);
    v.got.cap = MAX_IDS;
    v.got.ids = malloc(sizeof(int) * MAX_IDS);
    int rc = 0, turns = 0, bad = 0, cut = 0;
    if (!want_ids || !v.got.ids)
        rc = err_set("out of memory");
    else if (verify_open(&v))
        rc = -1;
    else if (dump_path && (dump_claim(dump_path, 4ll * v.lm.model.cfg.vocab_size, path) ||
                           part_open(&dump, dump_path)))
        rc = err_wrap("--dump-logits");
    char why[200] = "";
    int rebuilt = 0; /* by the last resume event */
    for (int i = 0; i < s->n_events && !rc && !bad; i++) {
        json_t *ev = s->events[i];
        ev_kind k = ev_kind_of(ev);
        int acted = k == EVK_RESUME     ? (rebuilt = verify_resume(&v, i))
                    : k == EVK_RESTORED ? verify_restored(&v, ev, rebuilt == 1)
                                        : apply_action(v.e, ev, path);
        if (acted < 0)
            rc = -1;
        if (acted || (k != EVK_USER && k != EVK_RETRY && k != EVK_EDIT))
            continue;
        int at = i;
        bad = verify_turn(&v, &i, ++turns, want_ids, dump.f, why, sizeof why);
        rc = bad < 0 ? -1 : 0;
        cut += i == at;
    }
    if (dump.f && part_commit(&dump, !rc) && !rc)
        rc = err_wrap("--dump-logits");
    if (!rc && bad)
        err_set("%s does not reproduce: %s", path, why); /* the exit status's reason */
    else if (!rc)
        printf("%s: all %d turns reproduce%s (the re-run evicted %d times and went to host memory "
               "%d times)\n",
               path, turns - cut, cut ? ", the cut ones aside" : "", v.got.evictions,
               v.got.offloads);
    fflush(stdout); /* the turns above the reason main prints on stderr */
    verify_close(&v);
    json_decref(v.got.end);
    free(want_ids);
    free(v.got.ids);
    return rc || bad ? EXIT_RUNTIME : 0;
}
