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
#include "check.h"
#include "model_fixture.h"

static void spans_by_hand(void)
{
    rd_reading r;
    rd_init(&r, 2, 3);
    /* keep 5 inside the first turn [0, 8), a message [8, 12), a reply in progress [12, 15) */
    win_turn t[3] = {{0, 8, ROLE_USER, 0}, {8, 4, ROLE_ASSISTANT, 0}, {12, 3, ROLE_ASSISTANT, 0}};
    for (int k = 0; k < 4; k++) { /* each of its four arrays failing to grow: said, nothing lost */
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
    win_turn p[2] = {{0, 3, ROLE_PREAMBLE, 0}, {3, 6, ROLE_USER, 0}};
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

/* a chat of four turns, its events into `events`, its last logits into *logits (malloc'd) */
static int attention_chat(int every, json_t *events, float **logits, int *vocab)
{
    model_opts mo;
    model_opts_init(&mo);
    mo.model_dir = fixture_model("f32", 64);
    mo.wtype = DT_F32;
    mo.device = "cpu";
    mo.n_predict = 20;
    mo.sp.temp = 0;
    mo.sp.repeat_penalty = 1;
    mo.kv.window = 40;
    loaded_model lm;
    if (load_model(&lm, &mo))
        return -1;
    ev_subscribe(lm.bus, collect, events);
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
    size_t i;
    json_t *v;
    json_array_foreach(off, i, v) off_att +=
        !strcmp(json_string_value(json_object_get(v, "ev")), "attention");
    json_array_foreach(on, i, v)
    {
        const char *ev = json_string_value(json_object_get(v, "ev"));
        if (!strcmp(ev, "token"))
            tokens++, in_reply = 1;
        if (!strcmp(ev, "turn_end"))
            in_reply = 0;
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
    }
    CHECK(n_att > 0 && off_att == 0, "%d attention events on, %d off", n_att, off_att);
    CHECK(bad == 0, "%d attention events that do not tile the window or sum to one", bad);
    /* each reply token is one decode step, told once */
    CHECK(steps == tokens, "%d steps counted, %d reply tokens", steps, tokens);
    CHECK(evict_in_reply > 0, "no eviction inside a reply");
    json_decref(on);
    json_decref(off);
}

TEST_TABLE(reading_tests, {"reading/spans_by_hand", spans_by_hand},
           {"reading/attention_events", attention_events});
