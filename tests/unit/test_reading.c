/* Where a reply's tokens read (model/reading.h): the spans against windows written out by hand,
 * and the engine's attention events through a chat that evicts inside replies: each a mean and a
 * max per span, spans that tile the window from its kept prefix, a head's weights summing to one,
 * every decode step counted once, and the logits the same bits as without the probe. The values
 * themselves are checked against NumPy's in tests/test_reference.sh, and the CUDA kernels' against
 * the CPU's in tests/unit/test_cuda.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/chat/engine.h"
#include "../../kernels/err.h"
#include "../../model/reading.h"
#include "../../ui/cache_model.h"
#include "check.h"
#include "model_fixture.h"

static void spans_by_hand(void)
{
    rd_reading r;
    rd_init(&r, 2, 3);
    /* keep 5 inside the first turn [0, 8), a message [8, 12), a reply in progress [12, 15) */
    win_turn t[3] = {{0, 8, ROLE_USER, 0, 0, 0, 0},
                     {8, 4, ROLE_ASSISTANT, 0, 0, 0, 0},
                     {12, 3, ROLE_ASSISTANT, 0, 0, 0, 0}};
    for (int k = 0; k < 5; k++) { /* each of its arrays failing to grow: said, nothing lost */
        rd_reading f;
        rd_init(&f, 2, 3);
        err_fail_allocs_after(k);
        CHECK(rd_spans(&f, t, 3, 5, 15, NULL, 1) == -1 && strstr(err_msg(), "attention's spans"),
              "allocation %d failing: %s", k, err_msg());
        err_fail_allocs_after(-1);
        rd_free(&f);
    }
    CHECK(rd_spans(&r, t, 3, 5, 15, NULL, 1) == 0, "%s", err_msg());
    static const int want[] = {0, 5, 8, 12, 15};
    CHECK(r.probe.n_spans == 4 && !memcmp(r.start, want, sizeof want), "spans %d: %d %d %d %d %d",
          r.probe.n_spans, r.start[0], r.start[1], r.start[2], r.start[3], r.start[4]);
    /* a preamble within the kept prefix is an empty span */
    win_turn p[2] = {{0, 3, ROLE_PREAMBLE, 0, 0, 0, 0}, {3, 6, ROLE_USER, 0, 0, 0, 0}};
    CHECK(rd_spans(&r, p, 2, 4, 9, NULL, 1) == 0 && r.probe.n_spans == 3 && r.start[1] == 4 &&
              r.start[2] == 4 && r.start[3] == 9,
          "a preamble inside the kept prefix");
    /* a step's mass: the mean over the 6 heads, and the most one gave */
    for (int i = 0; i < 6; i++)
        for (int s = 0; s < 3; s++)
            r.mass[i * 3 + s] = s == 2 ? (float)i / 10 : s == 1 ? 0.5f - (float)i / 10 : 0.5f;
    rd_step(&r);
    CHECK(fabs(r.mean[2] - 0.25) < 1e-6 && fabs(r.max[2] - 0.5) < 1e-6 &&
              fabs(r.max[1] - 0.5) < 1e-6 && r.steps == 1,
          "mean %g max %g %g", r.mean[2], r.max[2], r.max[1]);
    rd_free(&r);
}

static void collect(void *ctx, json_t *ev) { json_array_append(ctx, ev); }

/* the f32 test model in a window of 40, greedy, replies of n_predict, its events into `events` */
static int load(loaded_model *lm, model_opts *mo, int n_predict, json_t *events)
{
    model_opts_init(mo);
    mo->model_dir = fixture_model("f32", 64);
    mo->wtype = DT_F32;
    mo->device = "cpu";
    mo->n_predict = n_predict;
    mo->sp.temp = 0;
    mo->sp.repeat_penalty = 1;
    mo->kv.window = 40;
    if (load_model(lm, mo))
        return -1;
    ev_subscribe(lm->bus, collect, events);
    return 0;
}

/* a chat of four turns, its events into `events`, its last logits into *logits (malloc'd) */
static int attention_chat(int every, json_t *events, float **logits, int *vocab)
{
    model_opts mo;
    loaded_model lm;
    if (load(&lm, &mo, 20, events))
        return -1;
    /* --evict-at full, a window of 40 and replies of 20: evictions inside replies */
    engine_opts eo = {
        .tpl = TPL_NONE, .keep = 2, .evict_min = 8, .evict_at = WIN_AT_FULL, .attention = every};
    engine *e = engine_create(&lm, &mo, &eo);
    int c = e ? engine_new_conv(e) : -1, rc = c < 0 ? -1 : 0;
    static const char *const msgs[] = {"hello there", "how are you today", "and the cache",
                                       "one more"};
    for (int k = 0; k < 4 && !rc; k++) {
        char *reply = NULL;
        rc = engine_turn(e, c, msgs[k], &reply);
        free(reply);
    }
    *vocab = lm.model.cfg.vocab_size;
    if (!rc && !(*logits = malloc(sizeof(float) * (size_t)*vocab)))
        rc = -1;
    if (!rc)
        memcpy(*logits, engine_logits(e), sizeof(float) * (size_t)*vocab);
    engine_free(e);
    unload_model(&lm);
    return rc;
}

static void attention_events(void)
{
    json_t *on = json_array(), *off = json_array();
    float *a = NULL, *b = NULL;
    int V = 0;
    CHECK(attention_chat(3, on, &a, &V) == 0 && attention_chat(0, off, &b, &V) == 0, "%s",
          err_msg());
    CHECK(a && b && !memcmp(a, b, sizeof(float) * (size_t)V), "the probe changed the logits");
    free(a);
    free(b);
    int n_att = 0, steps = 0, tokens = 0, evict_in_reply = 0, in_reply = 0, bad = 0, off_att = 0;
    int bad_no = 0, last_no = 0, moved = 0, ends = 0, bad_end = 0;
    size_t i;
    json_t *v;
    json_array_foreach(off, i, v) off_att +=
        !strcmp(json_string_value(json_object_get(v, "ev")), "attention");
    json_array_foreach(on, i, v)
    {
        const char *ev = json_string_value(json_object_get(v, "ev"));
        if (!strcmp(ev, "token"))
            tokens++, in_reply = 1;
        if (!strcmp(ev, "turn_end")) { /* message k's reply is turn 2k (no preamble) */
            const json_t *nos = json_object_get(v, "numbers");
            size_t nt = json_array_size(json_object_get(v, "turns"));
            ends++;
            bad_end += json_array_size(nos) != nt ||
                       json_integer_value(json_array_get(nos, nt - 1)) != 2 * ends;
            in_reply = 0;
        }
        evict_in_reply += in_reply && !strcmp(ev, "evict");
        if (strcmp(ev, "attention"))
            continue;
        n_att++;
        const json_t *spans = json_object_get(v, "spans"), *mean = json_object_get(v, "mean");
        int n = (int)json_integer_value(json_object_get(v, "tokens")), at = 0;
        steps += n;
        bad += n < 1 || n > 3;
        double sum = 0;
        for (size_t s = 0; s < json_array_size(spans); s++) {
            const json_t *sp = json_array_get(spans, s);
            bad += json_integer_value(json_array_get(sp, 0)) != at;
            at += (int)json_integer_value(json_array_get(sp, 1));
            sum += json_number_value(json_array_get(mean, s));
        }
        bad += json_integer_value(json_array_get(json_array_get(spans, 0), 1)) != 2 ||
               fabs(sum - 1) > 1e-5;
        /* the turns by number: the prefix 0, then rising; where an eviction took turns, their
         * numbers are missing, and the others keep theirs */
        const json_t *nos = json_object_get(v, "turns");
        bad_no += json_array_size(nos) != json_array_size(spans) ||
                  json_integer_value(json_array_get(nos, 0)) != 0;
        for (size_t s = 2; s < json_array_size(nos); s++) {
            json_int_t lo = json_integer_value(json_array_get(nos, s - 1)),
                       hi = json_integer_value(json_array_get(nos, s));
            bad_no += hi <= lo;
            moved += hi > lo + 1;
        }
        last_no = (int)json_integer_value(json_array_get(nos, json_array_size(nos) - 1));
    }
    CHECK(bad_no == 0 && moved > 0 && last_no == 8,
          "turn numbers: %d out of order, %d gaps an eviction left, the last %d (want 8)", bad_no,
          moved, last_no);
    CHECK(ends == 4 && bad_end == 0, "%d of %d turn ends number their turns wrongly", bad_end,
          ends);
    CHECK(n_att > 0 && off_att == 0, "%d attention events on, %d off", n_att, off_att);
    CHECK(bad == 0, "%d attention events that do not tile the window or sum to one", bad);
    /* each reply token is one decode step, told once */
    CHECK(steps == tokens, "%d steps counted, %d reply tokens", steps, tokens);
    CHECK(evict_in_reply > 0, "no eviction inside a reply");
    json_decref(on);
    json_decref(off);
}

/* model/window.c's least-read rule by hand: whole turns by their reading, the least first, never
 * the kept prefix or a pinned turn; the oldest first beside it; a reply's end folding in */
static void least_read_by_hand(void)
{
    win_turn t[4] = {{0, 4, ROLE_USER, 0, 0.5f, 0, 0},
                     {4, 4, ROLE_ASSISTANT, 0, 0.1f, 0, 0},
                     {8, 4, ROLE_USER, 0, 0.3f, 0, 0},
                     {12, 4, ROLE_ASSISTANT, 1, 0.05f, 0, 0}};
    unsigned char d[16];
    static const struct {
        int target;
        win_policy policy;
        const char *want; /* the dropped positions */
    } k[] = {
        {1, WIN_LEAST_READ, "0000111100000000"}, /* turn 1, the least read (3 is pinned) */
        {6, WIN_LEAST_READ, "0000111111110000"}, /* then turn 2 */
        {9, WIN_LEAST_READ, "0011111111110000"}, /* then turn 0, its kept prefix left */
        {1, WIN_OLDEST, "0011000000000000"},     /* the oldest: turn 0 past the kept prefix */
        {3, WIN_OLDEST, "0011111100000000"},
        {6, WIN_RANKED, "0000111111110000"}, /* the caller's ranks, held in read: as least-read */
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        int n = win_plan(t, 4, 16, 2, 1, k[i].target, 0, k[i].policy, d);
        char got[17] = "";
        for (int p = 0; p < 16; p++)
            got[p] = (char)('0' + d[p]);
        int ones = 0;
        for (const char *q = k[i].want; *q; q++)
            ones += *q == '1';
        CHECK(!strcmp(got, k[i].want) && n == ones, "case %zu: dropped %s (%d), want %s", i, got, n,
              k[i].want);
    }
    t[0].took = 3; /* a reply of 4 steps gave turn 0 a share of 0.75 a step */
    win_fold_reading(t, 4, 4, WIN_LEAST_READ);
    CHECK(fabsf(t[0].read - (0.5f * WIN_READ_DECAY + 0.75f)) < 1e-6f && t[0].took == 0 &&
              fabsf(t[1].read - 0.1f * WIN_READ_DECAY) < 1e-6f,
          "folded: %g %g", t[0].read, t[1].read);
    t[1].took = 2; /* last-read keeps the last reply's reading alone */
    win_fold_reading(t, 4, 4, WIN_LAST_READ);
    CHECK(t[1].read == 0.5f && t[0].read == 0 && t[1].took == 0, "last-read folded: %g %g",
          t[0].read, t[1].read);
}

/* a least-read chat in a window of 40 (turn rule, evictions prepared and not), its events into
 * `events`, its last logits and window into *out (malloc'd), and the fresh pass's error */
static int least_read_chat(int prepare, json_t *events, float **out, double *fresh, int *vocab)
{
    model_opts mo;
    loaded_model lm;
    if (load(&lm, &mo, 8, events))
        return -1;
    engine_opts eo = {.tpl = TPL_NONE,
                      .keep = 2,
                      .evict_min = 4,
                      .evict_at = WIN_AT_TURN,
                      .prepare = prepare,
                      .policy = WIN_LEAST_READ};
    engine *e = engine_create(&lm, &mo, &eo);
    int c = e ? engine_new_conv(e) : -1, rc = c < 0 ? -1 : 0, V = lm.model.cfg.vocab_size, n = 0;
    *vocab = V;
    static const char *const msgs[] = {"hello there",     "how are you today",
                                       "and the cache",   "one more",
                                       "tell me a story", "why",
                                       "ok then",         "bye"};
    for (int k = 0; k < 8 && !rc; k++) {
        char *reply = NULL;
        rc = engine_turn(e, c, msgs[k], &reply);
        free(reply);
        engine_settle(e);
    }
    float *want = malloc(sizeof(float) * (size_t)V);
    *out = malloc(sizeof(float) * (size_t)V);
    const int *ids = rc ? NULL : engine_window(e, c, &n);
    kv_seq *s = ids ? kv_seq_new(lm.pool, 0) : NULL;
    if (!s || !want || !*out || gpt2_forward(&lm.model, lm.backend, s, ids, n, want))
        rc = -1;
    if (!rc) {
        memcpy(*out, engine_logits(e), sizeof(float) * (size_t)V);
        *fresh = rel_err(*out, want, V);
    }
    kv_seq_free(s);
    free(want);
    engine_free(e);
    unload_model(&lm);
    return rc;
}

/* --evict least-read: exact (a fresh pass over the window it leaves), the same bits prepared or
 * not, evicting turns other than the oldest, and the panel's forecast at each message the
 * eviction that message's turn made, drawn from the same events */
static void least_read_evicts_exactly(void)
{
    json_t *on = json_array(), *off = json_array();
    float *a = NULL, *b = NULL;
    double ea = 1, eb = 1;
    int V = 0;
    CHECK(least_read_chat(1, on, &a, &ea, &V) == 0 && least_read_chat(0, off, &b, &eb, &V) == 0,
          "%s", err_msg());
    CHECK(ea < 1e-5 && eb < 1e-5, "cached vs a fresh pass: %.3g prepared, %.3g not", ea, eb);
    CHECK(a && b && !memcmp(a, b, sizeof(float) * (size_t)V),
          "prepared and unprepared logits differ");
    free(a);
    free(b);
    cache_model m;
    cm_init(&m);
    int evictions = 0, not_oldest = 0, prepared = 0, forecast = 0, forecasts = 0, agreed = 0;
    unsigned char drop[64];
    int left;
    double turns;
    size_t i;
    json_t *v;
    json_array_foreach(on, i, v)
    {
        const char *ev = json_string_value(json_object_get(v, "ev"));
        if (!strcmp(ev, "user")) { /* what the panel expects this turn's start to drop */
            cm_conv *c = cm_conv_get(&m, 1);
            memset(drop, 0, sizeof drop); /* the preview marks only the window's cells */
            forecast = c && cm_preview(c, drop, &left, &turns) > 0 && left == 0;
        }
        if (!strcmp(ev, "evict")) {
            const json_t *r = json_object_get(v, "ranges");
            evictions++;
            prepared += json_is_true(json_object_get(v, "prepared"));
            not_oldest += json_integer_value(json_array_get(json_array_get(r, 0), 0)) != 2;
            if (forecast) { /* the forecast is the plan for the longest message: within it */
                int inside = 1;
                for (size_t k = 0; k < json_array_size(r); k++) {
                    const json_t *x = json_array_get(r, k);
                    for (json_int_t p = json_integer_value(json_array_get(x, 0)),
                                    e = p + json_integer_value(json_array_get(x, 1));
                         p < e && p < 64; p++)
                        drop[p] = drop[p] ? 2 : 3;
                }
                for (int p = 0; p < 64; p++)
                    inside &= drop[p] != 1;
                agreed += inside;
                forecasts++;
            }
            forecast = 0;
        }
        cm_apply(&m, v);
    }
    CHECK(evictions > 2 && not_oldest > 0 && prepared > 0,
          "%d evictions, %d not of the oldest turn, %d prepared", evictions, not_oldest, prepared);
    CHECK(forecasts > 0 && agreed == forecasts,
          "the panel's forecast held within %d of the %d evictions it foretold", agreed, forecasts);
    cm_free(&m);
    json_decref(on);
    json_decref(off);
}

TEST_TABLE(reading_tests, {"reading/spans_by_hand", spans_by_hand},
           {"reading/attention_events", attention_events},
           {"reading/least_read_by_hand", least_read_by_hand},
           {"reading/least_read_evicts_exactly", least_read_evicts_exactly});
