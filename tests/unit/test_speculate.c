/* Speculative decoding (model/speculate.c, model/draft.c): the verify pass's rows against one step
 * at a time; greedy replies token for token those of plain decoding, for every drafter, dtype and
 * penalty; under sampling, first tokens drawn with a draft against those drawn without, by a
 * chi-square test that a deliberately wrong rule (accept every draft) fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/cmd/commands.h"
#include "../../kernels/err.h"
#include "../../model/speculate.h"
#include "check.h"
#include "chi_square.h"
#include "model_fixture.h"

/* the target and a drafter of a layer fewer from its seed (their choices overlap), 300 ids */
#define TARGET fixture_checkpoint(2, 96, 3, 300, "f32")
#define SHALLOW fixture_checkpoint(1, 96, 3, 300, "f32")

typedef struct {
    gpt2_model m;
    kb_backend *b;
    kv_pool *pool;
} rig;

static int rig_open(rig *r, const char *dir, const char *type)
{
    dtype dt;
    dt_parse(type, &dt);
    r->b = kb_create("cpu", 1); /* tiny products: a second thread's wake-ups cost more */
    if (gpt2_load(&r->m, dir, dt, NULL) || gpt2_place(&r->m, r->b, NULL))
        return -1;
    kv_opts ko;
    kv_opts_default(&ko, &r->m.cfg);
    r->pool = kv_pool_create(r->b, &r->m.cfg, &ko, NULL);
    return r->pool ? 0 : -1;
}

static void rig_close(rig *r)
{
    kv_pool_free(r->pool);
    gpt2_free(&r->m);
    r->b->destroy(r->b);
}

/* The verify pass's rows, DRAFT_MAX_TOKENS + 1 of them, are bit for bit the logits one step at a
 * time gives, in every weight type (a pass longer than the CPU's streamed products take would sum
 * in another order: it is split) */
static void verify_rows(void)
{
    const char *types[3] = {"f32", "bf16", "q8"};
    enum { ROWS = DRAFT_MAX_TOKENS + 1 };
    for (int t = 0; t < 3; t++) {
        rig r;
        CHECK(rig_open(&r, fixture_model("f32", 40), types[t]) == 0, "load: %s", err_msg());
        int V = r.m.cfg.vocab_size, ids[19 + ROWS];
        for (int i = 0; i < 19 + ROWS; i++)
            ids[i] = (i * 7919 + 13) % V;
        kv_seq *a = kv_seq_new(r.pool, 0), *v = kv_seq_new(r.pool, 1);
        float *la = malloc(sizeof(float) * V * ROWS), *lv = malloc(sizeof(float) * V * ROWS),
              *last = malloc(sizeof(float) * V);
        /* plain decoding's steps after the prompt's prefill, from its last id on */
        CHECK(gpt2_forward(&r.m, r.b, a, ids, 19, NULL) == 0 &&
                  gpt2_forward(&r.m, r.b, v, ids, 19, NULL) == 0,
              "prefill: %s", err_msg());
        for (int i = 0; i < ROWS; i++)
            gpt2_forward(&r.m, r.b, a, ids + 19 + i, 1, la + (size_t)V * i);
        CHECK(gpt2_verify(&r.m, r.b, v, ids + 19, ROWS, lv) == 0, "verify: %s", err_msg());
        CHECK(kv_len(v) == 19 + ROWS && kv_len(a) == 19 + ROWS, "cache lengths %d, %d", kv_len(v),
              kv_len(a));
        int row = 0;
        while (row < ROWS && !memcmp(lv + (size_t)V * row, la + (size_t)V * row, 4 * V))
            row++;
        CHECK(row == ROWS, "%s: verify row %d differs from its step's (rel err %.3g)", types[t],
              row, row < ROWS ? rel_err(lv + (size_t)V * row, la + (size_t)V * row, V) : 0);
        CHECK(gpt2_last_logits(&r.m, last) == 0 &&
                  !memcmp(last, lv + (size_t)V * (ROWS - 1), 4 * V),
              "%s: the last logits after a verify pass are not its last row", types[t]);
        free(la);
        free(lv);
        free(last);
        kv_seq_free(a);
        kv_seq_free(v);
        rig_close(&r);
    }
}

/* fixture_decode on the rig */
static int decode(rig *r, drafter *d, const sampler_params *sp, const int *prompt, int n,
                  int n_predict, int *out, spec_stats *stats)
{
    return fixture_decode(&r->m, r->b, r->pool, d, sp, prompt, n, n_predict, out, stats);
}

/* Greedy: the reply is token for token plain decoding's, for each drafter and weight dtype, with
 * and without the repeat penalty; the counts add up */
static void greedy_same_reply(void)
{
    const char *types[3] = {"f32", "bf16", "q8"};
    const char *other = SHALLOW;
    int prompt[6] = {46, 290, 86, 262, 290, 86}; /* a repeat, for lookup */
    for (int t = 0; t < 3; t++) {
        rig r;
        const char *dir = TARGET;
        CHECK(rig_open(&r, dir, types[t]) == 0, "load: %s", err_msg());
        draft_opts o;
        draft_opts_default(&o);
        const char *drafters[3] = {"lookup", "self-q8", other};
        for (int k = 0; k < 3; k++)
            for (int pen = 0; pen < 2; pen++) {
                sampler_params sp = sampler_defaults();
                sp.temp = 0;
                sp.repeat_penalty = pen ? 1.1f : 1.0f;
                draft_parse(drafters[k], &o);
                o.max = k == 1 ? DRAFT_MAX_TOKENS : 2 + 2 * k; /* up to the longest pass */
                drafter *d = draft_new(&o, &r.m, dir, r.b, r.pool, 1);
                CHECK(d, "%s: %s", drafters[k], err_msg());
                int want[60], got[60];
                spec_stats st = {0};
                CHECK(decode(&r, NULL, &sp, prompt, 6, 60, want, NULL) == 0 &&
                          decode(&r, d, &sp, prompt, 6, 60, got, &st) == 0,
                      "decode: %s", err_msg());
                int i = 0;
                while (i < 60 && want[i] == got[i])
                    i++;
                CHECK(i == 60, "%s weights, %s drafting, penalty %g: token %d is %d, plain %d",
                      types[t], drafters[k], sp.repeat_penalty, i, got[i % 60], want[i % 60]);
                CHECK(st.accepted <= st.tested && st.tested <= st.drafted &&
                          st.made == st.accepted + st.rounds && st.made >= 59,
                      "counts: %ld drafted, %ld tested, %ld accepted, %ld made in %ld rounds",
                      st.drafted, st.tested, st.accepted, st.made, st.rounds);
                CHECK(st.accepted > 0, "%s never kept a draft", drafters[k]);
                draft_free(d);
            }
        rig_close(&r);
    }
}

/* 20,000 draws a side; under AddressSanitizer, which checks the same code for memory faults and
 * runs it three times slower, 4,000 (the wrong rule still fails by far) */
#ifdef __SANITIZE_ADDRESS__
enum { DRAWS = 4000, N_CTX = 7 };
#else
enum { DRAWS = 20000, N_CTX = 7 };
#endif

/* Sampling (temperature, top-k 4, top-p, the penalty): the first token of a round, drawn DRAWS
 * times with a draft (another model's, and lookup's) and without, agree by chi-square at p >
 * 0.001; the first drafted token itself (what accepting every draft would give) does not */
static void sampling_same_distribution(void)
{
    const char *dir = TARGET, *other = SHALLOW;
    rig r;
    CHECK(rig_open(&r, dir, "f32") == 0, "load: %s", err_msg());
    /* a context whose lookup draft (the token after the earlier 5 9 17) is likely: that token
     * made the model's first choice there, a few times over */
    int V = r.m.cfg.vocab_size, ids[N_CTX] = {5, 9, 17, 33, 5, 9, 17};
    sampler_params sp = {.temp = 0.9f, .top_k = 4, .top_p = 0.95f, .repeat_penalty = 1.1f};
    int *plain = calloc((size_t)V, sizeof(int)), *first = calloc((size_t)V, sizeof(int)),
        *drafted = calloc((size_t)V, sizeof(int));
    kv_seq *cache = kv_seq_new(r.pool, 0);
    float *logits = malloc(sizeof(float) * V);
    for (int i = 0; i < 6; i++) {
        sampler smp;
        sampler_init(&smp, &(sampler_params){.temp = 0, .repeat_penalty = 1});
        kb_sample k = sampler_draw(&smp, ids, N_CTX);
        kv_truncate(cache, 0);
        CHECK(gpt2_forward(&r.m, r.b, cache, ids, N_CTX, logits) == 0 &&
                  r.b->sample(r.b, &ids[3], logits, V, &k) == 0,
              "prefill: %s", err_msg());
    }
    /* without a draft: the model's own rule on the logits after the context */
    kv_truncate(cache, 0);
    CHECK(gpt2_forward(&r.m, r.b, cache, ids, N_CTX, logits) == 0, "prefill: %s", err_msg());
    for (int i = 0; i < DRAWS; i++) {
        sp.seed = 1000003u * (unsigned)i;
        sampler smp;
        sampler_init(&smp, &sp);
        kb_sample k = sampler_draw(&smp, ids, N_CTX);
        int id;
        r.b->sample(r.b, &id, logits, V, &k);
        plain[id]++;
    }
    const char *drafters[2] = {other, "lookup"};
    for (int w = 0; w < 2; w++) {
        draft_opts o;
        draft_opts_default(&o);
        draft_parse(drafters[w], &o);
        o.max = 3;
        o.min_prob = 0;
        drafter *d = draft_new(&o, &r.m, dir, r.b, r.pool, 1);
        spec *s = d ? spec_new(&r.m, r.b, d) : NULL;
        CHECK(s, "%s: %s", drafters[w], err_msg());
        memset(first, 0, sizeof(int) * V);
        memset(drafted, 0, sizeof(int) * V);
        double *q = malloc(sizeof(double) * V * DRAFT_MAX_TOKENS);
        for (int i = 0; s && i < DRAWS; i++) {
            sp.seed = 7777777u * (unsigned)i + 1;
            sampler smp;
            sampler_init(&smp, &sp);
            int out[DRAFT_MAX_TOKENS + 1], got, rejected, prop[DRAFT_MAX_TOKENS], np;
            kv_truncate(cache, N_CTX - 1); /* its last id pending */
            if (spec_round(s, cache, ids, N_CTX, &smp, 4, out, &got, &rejected))
                break;
            first[out[0]]++;
            sampler_init(&smp, &sp); /* the drafter's own first choice, as drawn in the round */
            if (draft_propose(d, ids, N_CTX, &smp, 1, prop, &np, draft_model(d) ? q : NULL) || !np)
                break;
            drafted[prop[0]]++;
        }
        double p_right = chi_square_p(first, plain, V), p_wrong = chi_square_p(drafted, plain, V);
        CHECK(p_right > 0.001, "%s: with a draft against without, p = %.3g", drafters[w], p_right);
        CHECK(p_wrong < 0.001, "%s: accepting every draft passed the test too (p = %.3g)",
              drafters[w], p_wrong);
        const spec_stats *st = s ? spec_get_stats(s) : NULL;
        CHECK(st && st->accepted > 0 && st->accepted < st->drafted,
              "%s: a test that means something keeps some drafts and rejects some", drafters[w]);
        free(q);
        spec_free(s);
        draft_free(d);
    }
    free(plain);
    free(first);
    free(drafted);
    free(logits);
    kv_seq_free(cache);
    rig_close(&r);
}

/* Two tokens of a reply from the logits after ids[0..n) (the cache holds ids[0..n - 1), the last
 * id pending): decoded plainly (s NULL) or by speculative rounds; the cache is left as it was. */
static int two_tokens(rig *r, spec *s, kv_seq *cache, int *ids, int n, sampler *smp, float *logits,
                      int out[2])
{
    int V = r->m.cfg.vocab_size;
    for (int i = 0; i < 2; i++) {
        if (s) {
            if (spec_next(s, cache, ids, n + i, smp, 5, &out[i], NULL))
                return -1;
        } else {
            kb_sample k = sampler_draw(smp, ids, n + i);
            if (gpt2_forward(&r->m, r->b, cache, ids + n + i - 1, 1, logits) ||
                r->b->sample(r->b, &out[i], logits, V, &k))
                return -1;
        }
        ids[n + i] = out[i];
    }
    if (s)
        spec_drop(s);
    return kv_truncate(cache, n - 1);
}

/* The first two tokens of a reply, drawn DRAWS times with a model drafter at its default settings
 * (up to 4 drafts, stopping under a peak of 0.5) and without: their joint distribution agrees by
 * chi-square at p > 0.001. A drafter that decides to stop from the token it has drawn makes the
 * second token's odds depend on whether it was drafted: that fails (p = 4e-5 and far less). */
static void sampling_two_tokens(void)
{
    const char *dir = TARGET;
    rig r;
    CHECK(rig_open(&r, dir, "f32") == 0, "load: %s", err_msg());
    int V = r.m.cfg.vocab_size, ids[N_CTX + 2] = {5, 9, 17, 33, 5, 9, 17}, pair[2];
    sampler_params sp = {.temp = 0.9f, .top_k = 4, .top_p = 0.95f, .repeat_penalty = 1.1f};
    int *plain = calloc((size_t)V * V, sizeof(int)), *drafted = calloc((size_t)V * V, sizeof(int));
    kv_seq *cache = kv_seq_new(r.pool, 0);
    float *logits = malloc(sizeof(float) * V);
    CHECK(gpt2_forward(&r.m, r.b, cache, ids, N_CTX - 1, NULL) == 0, "prefill: %s", err_msg());
    for (int i = 0; i < DRAWS; i++) {
        sampler smp;
        sampler_init(&smp, &(sampler_params){.temp = sp.temp,
                                             .top_k = sp.top_k,
                                             .top_p = sp.top_p,
                                             .repeat_penalty = sp.repeat_penalty,
                                             .seed = 1000003u * (unsigned)i});
        if (two_tokens(&r, NULL, cache, ids, N_CTX, &smp, logits, pair))
            break;
        plain[pair[0] * V + pair[1]]++;
    }
    const char *drafters[2] = {SHALLOW, "self-q8"};
    for (int w = 0; w < 2; w++) {
        draft_opts o;
        draft_opts_default(&o);
        draft_parse(drafters[w], &o);
        drafter *d = draft_new(&o, &r.m, dir, r.b, r.pool, 1);
        spec *s = d ? spec_new(&r.m, r.b, d) : NULL;
        CHECK(s, "%s: %s", drafters[w], err_msg());
        memset(drafted, 0, sizeof(int) * V * V);
        for (int i = 0; s && i < DRAWS; i++) {
            sp.seed = 7777777u * (unsigned)i + 1;
            sampler smp;
            sampler_init(&smp, &sp);
            if (two_tokens(&r, s, cache, ids, N_CTX, &smp, logits, pair))
                break;
            drafted[pair[0] * V + pair[1]]++;
        }
        const spec_stats *st = s ? spec_get_stats(s) : NULL;
        double p = chi_square_p(drafted, plain, V * V);
        CHECK(p > 0.001, "%s: two tokens with a draft against without, p = %.3g", drafters[w], p);
        CHECK(st && st->drafted > st->rounds && st->accepted < st->drafted,
              "%s: rounds of more than one draft, some rejected (%ld drafted in %ld rounds)",
              drafters[w], st ? st->drafted : 0, st ? st->rounds : 0);
        spec_free(s);
        draft_free(d);
    }
    free(plain);
    free(drafted);
    free(logits);
    kv_seq_free(cache);
    rig_close(&r);
}

/* the bytes conversation 0's cache grew by, summed over its grow events */
static void add_grows(void *ctx, json_t *ev)
{
    if (!strcmp(json_string_value(json_object_get(ev, "ev")), "grow") &&
        json_integer_value(json_object_get(ev, "conv")) == 0)
        *(long long *)ctx += json_integer_value(json_object_get(ev, "bytes"));
}

/* Rejected drafts keep their blocks: on a paged cache of 2-position blocks, where most rejections
 * cut below a block's start, the cache grows only to new reach, its grows adding up to what it
 * holds at the end (a cut that gave blocks back took them again at the next round: more) */
static void rejected_keep_blocks(void)
{
    const char *dir = TARGET;
    rig r;
    CHECK(rig_open(&r, dir, "f32") == 0, "load: %s", err_msg());
    kv_opts ko = *kv_pool_opts(r.pool);
    ko.block_tokens = 2;
    ev_bus *bus = ev_bus_create();
    long long grown = 0;
    ev_subscribe(bus, add_grows, &grown);
    kv_pool *pool = kv_pool_create(r.b, &r.m.cfg, &ko, bus);
    draft_opts o;
    draft_opts_default(&o);
    draft_parse(SHALLOW, &o);
    o.min_prob = 0;
    drafter *d = draft_new(&o, &r.m, dir, r.b, pool, 1);
    spec *s = d ? spec_new(&r.m, r.b, d) : NULL;
    kv_seq *cache = kv_seq_new(pool, 0);
    CHECK(s && cache, "setup: %s", err_msg());
    sampler smp;
    sampler_init(&smp, &(sampler_params){.temp = 1, .top_p = 1, .repeat_penalty = 1, .seed = 3});
    int ids[96] = {5, 9, 17, 33, 5, 9, 17}, n = 7;
    CHECK(gpt2_forward(&r.m, r.b, cache, ids, n - 1, NULL) == 0, "prefill: %s", err_msg());
    while (s && cache && n < 80 && !spec_next(s, cache, ids, n, &smp, 90 - n, &ids[n], NULL))
        n++;
    kv_seq_stats st;
    kv_seq_get_stats(cache, &st);
    const spec_stats *ss = s ? spec_get_stats(s) : NULL;
    CHECK(n == 80, "decoding stopped at %d: %s", n, err_msg());
    CHECK(ss && ss->accepted + 10 < ss->drafted && grown == (long long)st.reserved_bytes,
          "grows added %lld bytes to hold %zu (%ld of %ld drafts rejected)", grown,
          st.reserved_bytes, ss ? ss->drafted - ss->accepted : 0, ss ? ss->drafted : 0);
    kv_seq_free(cache);
    spec_free(s);
    draft_free(d);
    kv_pool_free(pool);
    ev_bus_free(bus);
    rig_close(&r);
}

/* a drafter with another vocabulary is refused, naming both; bad settings are errors */
static void drafter_errors(void)
{
    rig r;
    const char *dir = fixture_model("f32", 96);
    CHECK(rig_open(&r, dir, "f32") == 0, "load: %s", err_msg());
    draft_opts o;
    draft_opts_default(&o);
    draft_parse(TARGET, &o);
    CHECK(!draft_new(&o, &r.m, dir, r.b, r.pool, 1) && strstr(err_msg(), "vocabulary of 300") &&
              strstr(err_msg(), TARGET) && strstr(err_msg(), "50257") && strstr(err_msg(), dir),
          "another vocabulary: %s", err_msg());
    char missing[4200]; /* a path of the run's own that nothing made */
    snprintf(missing, sizeof missing, "%s/missing-draft", temp_dir());
    CHECK(draft_parse(missing, &o) == -1 && strstr(err_msg(), missing) &&
              strstr(err_msg(), "lookup, self-q8, off"),
          "a missing draft's name: %s", err_msg());
    o.kind = DRAFT_MODEL; /* gone between the options and the load */
    o.dir = missing;
    CHECK(!draft_new(&o, &r.m, dir, r.b, r.pool, 1) && strstr(err_msg(), missing),
          "a missing draft: %s", err_msg());
    draft_parse("lookup", &o);
    o.max = DRAFT_MAX_TOKENS + 1;
    CHECK(!draft_new(&o, &r.m, dir, r.b, r.pool, 1) && strstr(err_msg(), "--draft-max"),
          "too long a draft: %s", err_msg());
    CHECK(draft_parse("", &o) == -1, "an empty --draft taken");
    /* lookup: the latest earlier match with enough tokens after it, else the earliest */
    int same[8] = {5, 5, 5, 5, 5, 5, 5, 5}, period[9] = {7, 8, 9, 7, 8, 9, 7, 8, 9}, got[4], n;
    draft_parse("lookup", &o);
    o.max = 4;
    drafter *d = draft_new(&o, &r.m, dir, r.b, r.pool, 1);
    CHECK(d && draft_propose(d, same, 8, NULL, 4, got, &n, NULL) == 0 && n == 4,
          "a run of one token: %d drafted, want 4", n);
    CHECK(d && draft_propose(d, period, 9, NULL, 4, got, &n, NULL) == 0 && n == 3 && got[0] == 7 &&
              got[1] == 8 && got[2] == 9,
          "a period of 3: %d drafted", n);
    draft_free(d);
    rig_close(&r);
}

TEST_TABLE(speculate_tests, {"speculate/verify_rows_are_steps", verify_rows},
           {"speculate/greedy_same_reply", greedy_same_reply},
           {"speculate/sampling_same_distribution", sampling_same_distribution},
           {"speculate/sampling_two_tokens", sampling_two_tokens},
           {"speculate/rejected_keep_blocks", rejected_keep_blocks},
           {"speculate/drafter_errors", drafter_errors});
