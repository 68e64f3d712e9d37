/* Speculative decoding in the chat engine (--draft): greedy conversations token for token those of
 * the engine without a drafter, through evictions, retries, edits and forks, for each kind of
 * drafter; the cache after every turn a fresh pass's (sampling too, where drafts are rejected);
 * every rejection a truncate event of the model's cache as well as the drafter's; the panel's
 * model rebuilt from the events agreeing with the engine; a drafter's cache forked, and offloaded
 * with its conversation. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../app/chat/engine.h"
#include "../../app/cmd/commands.h"
#include "../../kernels/err.h"
#include "../../ui/cache_model.h"
#include "check.h"
#include "model_fixture.h"

/* the target (2 layers) and a drafter of one layer from the same seed: its embeddings are the
 * target's, so its choices overlap */
#define TARGET fixture_checkpoint(2, 64, 7, 0, "f32")
#define SHALLOW fixture_checkpoint(1, 64, 7, 0, "f32")

typedef struct {
    loaded_model lm;
    engine *e;
    json_t *events;
} rig;

static void collect(void *ctx, json_t *ev) { json_array_append(((rig *)ctx)->events, ev); }

/* prepare: evictions at a turn's start prepared between turns (--prepare-evict on) */
static int setup(rig *r, const char *draft, float temp, double idle, int prepare)
{
    memset(r, 0, sizeof *r);
    model_opts mo;
    model_opts_init(&mo);
    mo.model_dir = TARGET;
    mo.wtype = DT_F32;
    mo.device = "cpu";
    mo.threads = 1;
    mo.n_predict = 10;
    mo.sp.temp = temp;
    mo.sp.seed = 3;
    mo.kv.window = 48;
    engine_opts eo = {.tpl = TPL_GPT2,
                      .keep = -1,
                      .evict_min = 8,
                      .idle_offload = idle,
                      .evict_at = prepare ? WIN_AT_TURN : 0,
                      .prepare = prepare};
    draft_opts_default(&eo.draft);
    if (draft && draft_parse(draft, &eo.draft))
        return -1;
    if (load_model(&r->lm, &mo)) {
        CHECK(0, "load: %s", err_msg());
        return -1;
    }
    r->events = json_array();
    ev_subscribe(r->lm.bus, collect, r);
    r->e = engine_create(&r->lm, &mo, &eo);
    CHECK(r->e, "engine with --draft %s: %s", draft ? draft : "off", err_msg());
    return r->e ? 0 : -1;
}

static void teardown(rig *r)
{
    engine_free(r->e);
    json_decref(r->events);
    unload_model(&r->lm);
}

/* the cached logits of conv's last position against a fresh pass over its window */
static double fresh_error(rig *r, int conv)
{
    int n, V = r->lm.model.cfg.vocab_size;
    const int *ids = engine_window(r->e, conv, &n);
    kv_opts o;
    kv_opts_default(&o, &r->lm.model.cfg);
    kv_pool *p = kv_pool_create(r->lm.backend, &r->lm.model.cfg, &o, NULL);
    kv_seq *s = p ? kv_seq_new(p, 0) : NULL;
    float *want = malloc(sizeof(float) * (size_t)V);
    double err = 1;
    if (s && want && !gpt2_forward(&r->lm.model, r->lm.backend, s, ids, n, want))
        err = rel_err(engine_logits(r->e), want, V);
    free(want);
    kv_seq_free(s);
    kv_pool_free(p);
    return err;
}

/* A model drafter's cache against its window: its rows but the last, read by one more step of the
 * drafter's model, against a fresh pass over the same prefix of the window. A drafter cut back by
 * length rather than by the ids it holds keeps a retried reply's or an edit's old rows. 0 for a
 * drafter with no cache. */
static double draft_fresh_error(rig *r, int conv)
{
    drafter *d = engine_drafter(r->e, conv);
    kv_seq *seq = d ? draft_seq(d) : NULL;
    int n, L = seq ? kv_len(seq) : 0;
    const int *ids = engine_window(r->e, conv, &n);
    if (L < 2)
        return 0;
    if (L > n)
        return 1;
    gpt2_model *m = (gpt2_model *)draft_model(d); /* its work buffers: nothing else runs now */
    int V = m->cfg.vocab_size;
    kv_seq *kept = kv_fork(seq, 99), *fresh = kv_fork(seq, 98);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    double err = 1;
    if (kept && fresh && a && b && !kv_truncate(kept, L - 1) && !kv_truncate(fresh, 0) &&
        !gpt2_forward(m, r->lm.backend, kept, ids + L - 1, 1, a) &&
        !gpt2_forward(m, r->lm.backend, fresh, ids, L, b))
        err = rel_err(a, b, V);
    free(a);
    free(b);
    kv_seq_free(kept);
    kv_seq_free(fresh);
    return err;
}

/* one step of the scenario on conversation c: a turn, a retry, an edit; *reply gets the reply */
static int step(engine *e, int c, int k, char **reply)
{
    static const char *const msgs[] = {"Hello there", "How are you today?",
                                       "Tell me about the cache", "And when it fills up?"};
    return k % 4 == 2   ? engine_retry(e, c, reply)
           : k % 4 == 3 ? engine_edit(e, c, "edited it", reply)
                        : engine_turn(e, c, msgs[k % 4], reply);
}

static int is_draft(const json_t *ev)
{
    return json_is_true(json_object_get(json_object_get(ev, "cache"), "draft"));
}

/* every verify event that rejected drafts is followed, before anything else of its conversation's
 * cache, by the model's truncate of exactly them; the drafted token events are drafts kept */
static void rejections_reported(rig *r, const char *name)
{
    size_t i;
    json_t *v;
    long accepted = 0, drafted_tokens = 0;
    int want = -1, bad = 0, verifies = 0;
    json_array_foreach(r->events, i, v)
    {
        ev_kind k = ev_kind_of(v);
        if (k == EVK_VERIFY) {
            bad += want > 0;
            verifies++;
            accepted += ev_verify_accepted(v);
            want = ev_verify_drafted(v) - ev_verify_accepted(v);
        } else if (k == EVK_TRUNCATE && !is_draft(v) && want > 0) {
            bad += ev_truncate_from(v) - ev_truncate_to(v) != want;
            want = -1;
        } else if (k == EVK_TOKEN) {
            bad += want > 0; /* a token before the rejected drafts were cut */
            drafted_tokens += ev_token_drafted(v);
            want = -1;
        }
    }
    CHECK(verifies > 0 && !bad, "%s: %d verify events, %d rejections not reported as truncates",
          name, verifies, bad);
    CHECK(drafted_tokens > 0 && drafted_tokens <= accepted,
          "%s: %ld drafted token events for %ld drafts accepted", name, drafted_tokens, accepted);
}

/* the panel's model from the events alone: the conversation's cells are the engine's window, and
 * the pool's bytes in use those of the last event of the pool (a drafter's in the same pool too;
 * not one in a pool of its own) */
static void panel_agrees(rig *r, int conv, const char *name)
{
    cache_model m;
    cm_init(&m);
    size_t i;
    json_t *v;
    int pool_wrong = 0, draft_events = 0;
    long long pool = 0;
    json_array_foreach(r->events, i, v)
    {
        cm_apply(&m, v);
        const json_t *t = json_object_get(v, "cache");
        if (t && !ev_cache_own_pool(t))
            pool = ev_cache_pool_used(t);
        draft_events += ev_cache_draft(t);
        pool_wrong += t && (long long)m.pool_used != pool;
    }
    CHECK(!pool_wrong,
          "%s: the panel's pool bytes differ from the events' %d times (%d drafter events)", name,
          pool_wrong, draft_events);
    int n;
    engine_window(r->e, conv, &n);
    cm_conv *mc = cm_conv_get(&m, conv);
    CHECK(mc && mc->n_cells == n && mc->draft.rounds > 0,
          "%s: the panel has %d cells and %ld verify passes; the window %d tokens", name,
          mc ? mc->n_cells : -1, mc ? mc->draft.rounds : -1L, n);
    CHECK(mc && mc->draft.tokens <= n, "%s: the panel's draft cache holds %d of a window of %d",
          name, mc ? mc->draft.tokens : -1, n);
    cm_free(&m);
}

/* a cut of a drafter's cache to a prefix longer than a round's reach (not to 0: its memory given
 * back to the pool) */
static int cut_back(const json_t *v)
{
    return ev_kind_of(v) == EVK_TRUNCATE && is_draft(v) && ev_truncate_to(v) > 0 &&
           ev_truncate_from(v) - ev_truncate_to(v) > DRAFT_MAX_TOKENS + 1;
}

/* A model drafter's cache follows an eviction inside it: cut and re-prefilled (or swapped in,
 * prepared) before the evict event, whose time then holds the wait; never cut to the kept prefix
 * at the first draft after it (a wait no figure counted) */
static void drafter_caught_up_in_eviction(rig *r, int conv, const char *name)
{
    size_t i;
    json_t *v;
    int evicted = 0, late = 0, watch = 0;
    json_array_foreach(r->events, i, v)
    {
        ev_kind k = ev_conv(v) == conv ? ev_kind_of(v) : EVK_NONE;
        if (k == EVK_EVICT)
            evicted += watch = 1;
        else if (k == EVK_VERIFY)
            watch = 0;
        else if (k == EVK_TRUNCATE && cut_back(v))
            late += watch;
    }
    CHECK(!late, "%s: the drafter's cache was cut to the kept prefix after %d of %d evictions",
          name, late, evicted);
}

static void greedy_same_as_plain(void)
{
    const char *drafters[] = {"lookup", "self-q8", SHALLOW};
    for (int d = 0; d < 3; d++) {
        rig plain, sp;
        const char *name = d < 2 ? drafters[d] : "a shallower checkpoint";
        if (setup(&plain, NULL, 0, 0, 0) || setup(&sp, drafters[d], 0, 0, 0))
            return;
        int a = engine_new_conv(plain.e), b = engine_new_conv(sp.e), same = 1, fresh = 1,
            drafts_fresh = 1;
        for (int k = 0; k < 9; k++) {
            if (k == 5) { /* the rest on a fork: its drafter's cache shares the parent's */
                a = engine_fork(plain.e, a);
                b = engine_fork(sp.e, b);
            }
            char *x = NULL, *y = NULL;
            int rx = step(plain.e, a, k, &x), ry = step(sp.e, b, k, &y);
            CHECK(!rx && !ry, "%s, step %d: %s", name, k, err_msg());
            same &= x && y && !strcmp(x, y);
            fresh &= fresh_error(&sp, b) < 1e-5;
            drafts_fresh &= draft_fresh_error(&sp, b) < 1e-5;
            free(x);
            free(y);
        }
        int na, nb;
        const int *wa = engine_window(plain.e, a, &na), *wb = engine_window(sp.e, b, &nb);
        same &= na == nb && !memcmp(wa, wb, sizeof *wa * (size_t)na);
        CHECK(same, "%s: the replies or windows differ from plain decoding's", name);
        CHECK(fresh, "%s: the cache after a turn differs from a fresh pass", name);
        CHECK(drafts_fresh, "%s: the drafter's cache after a turn is not its window's prefix",
              name);
        int evicted = 0, forked = 0;
        size_t i;
        json_t *v;
        json_array_foreach(sp.events, i, v)
        {
            evicted += ev_kind_of(v) == EVK_EVICT;
            forked += ev_kind_of(v) == EVK_FORK && is_draft(v) && ev_fork_shared_blocks(v) > 0 &&
                      ev_conv(v) < 98; /* not draft_fresh_error's */
        }
        CHECK(evicted > 0, "%s: the scenario evicted nothing", name);
        CHECK(d == 0 || forked == 1, "%s: %d forks of the drafter's cache sharing blocks", name,
              forked);
        rejections_reported(&sp, name);
        drafter_caught_up_in_eviction(&sp, b, name);
        panel_agrees(&sp, b, name);
        teardown(&plain);
        teardown(&sp);
    }
}

/* A prepared eviction prepares a model drafter's cache with the model's: swapped in, the drafter
 * holds the window after it (a fresh pass's) with no cut of its own, and the replies are plain
 * decoding's */
static void prepared_eviction_prepares_drafter(void)
{
    static const char *const msgs[] = {"Hello there", "How are you today?",
                                       "Tell me about the cache", "And when it fills up?"};
    rig plain, sp;
    if (setup(&plain, NULL, 0, 0, 1) || setup(&sp, "self-q8", 0, 0, 1))
        return;
    int a = engine_new_conv(plain.e), b = engine_new_conv(sp.e), same = 1, fresh = 1;
    for (int k = 0; k < 8; k++) {
        char *x = NULL, *y = NULL;
        int ok =
            !engine_turn(plain.e, a, msgs[k % 4], &x) && !engine_turn(sp.e, b, msgs[k % 4], &y);
        CHECK(ok, "turn %d: %s", k, err_msg());
        same &= ok && !strcmp(x, y);
        free(x);
        free(y);
        engine_settle(plain.e);
        engine_settle(sp.e);
        fresh &= draft_fresh_error(&sp, b) < 1e-5;
    }
    CHECK(same, "the replies differ from plain decoding's");
    CHECK(fresh, "the drafter's cache after a turn is not its window's prefix");
    size_t i;
    json_t *v;
    int swapped = 0, cut = 0, cut_before_swap = 0;
    json_array_foreach(sp.events, i, v)
    {
        ev_kind k = ev_conv(v) == b ? ev_kind_of(v) : EVK_NONE; /* not draft_fresh_error's */
        if (k == EVK_VERIFY)
            cut = 0;
        if (k == EVK_TRUNCATE && cut_back(v))
            cut = 1;
        if (k == EVK_EVICT && ev_evict_prepared(v)) {
            swapped++;
            cut_before_swap += cut;
        }
    }
    CHECK(swapped > 0 && !cut_before_swap,
          "%d prepared evictions, %d of them cutting the drafter's cache back (none prepared)",
          swapped, cut_before_swap);
    drafter_caught_up_in_eviction(&sp, b, "self-q8, prepared");
    teardown(&plain);
    teardown(&sp);
}

/* sampling rejects drafts: what the cache keeps is still exactly the window */
static void sampling_keeps_cache_exact(void)
{
    rig r;
    if (setup(&r, SHALLOW, 0.9f, 0, 0))
        return;
    int c = engine_new_conv(r.e), fresh = 1;
    for (int k = 0; k < 8; k++) {
        char *y = NULL;
        CHECK(!step(r.e, c, k, &y), "step %d: %s", k, err_msg());
        fresh &= fresh_error(&r, c) < 1e-5 && draft_fresh_error(&r, c) < 1e-5;
        free(y);
    }
    CHECK(fresh, "sampling: the cache or the drafter's after a turn differs from a fresh pass");
    const spec_stats *st = engine_spec_stats(r.e);
    CHECK(st && st->accepted > 0 && st->accepted < st->drafted,
          "sampling: %ld of %ld drafts kept (some of each expected)", st ? st->accepted : -1L,
          st ? st->drafted : -1L);
    rejections_reported(&r, "sampling");
    panel_agrees(&r, c, "sampling");
    teardown(&r);
}

/* an idle conversation's drafter's cache goes to host memory with its own, and comes back */
static void offloaded_with_its_conversation(void)
{
    rig r;
    if (setup(&r, "self-q8", 0, 0.001, 0))
        return;
    int a = engine_new_conv(r.e), b = engine_new_conv(r.e);
    char *y;
    CHECK(!engine_turn(r.e, a, "first conversation", &y), "a: %s", err_msg());
    free(y);
    struct timespec ts = {0, 20 * 1000 * 1000}; /* past the idle time of 1 ms */
    nanosleep(&ts, NULL);
    CHECK(!engine_turn(r.e, b, "second conversation", &y), "b: %s", err_msg());
    free(y);
    CHECK(!engine_turn(r.e, a, "back to the first", &y), "a again: %s", err_msg());
    free(y);
    int off = 0, back = 0;
    size_t i;
    json_t *v;
    json_array_foreach(r.events, i, v)
    {
        off += ev_kind_of(v) == EVK_OFFLOAD && is_draft(v) && ev_conv(v) == a;
        back += ev_kind_of(v) == EVK_RESTORE && is_draft(v) && ev_conv(v) == a;
    }
    CHECK(off == 1 && back == 1, "the drafter's cache: %d offloads, %d restores", off, back);
    CHECK(fresh_error(&r, a) < 1e-5, "logits after the restore");
    teardown(&r);
}

TEST_TABLE(engine_draft_tests, {"draft/chat_greedy_same_as_plain", greedy_same_as_plain},
           {"draft/prepared_eviction_prepares_drafter", prepared_eviction_prepares_drafter},
           {"draft/chat_sampling_keeps_cache_exact", sampling_keeps_cache_exact},
           {"draft/chat_offloaded_with_its_conversation", offloaded_with_its_conversation});
