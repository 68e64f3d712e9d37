/* kvchat bench --speculative: what speculative decoding (model/speculate.h) buys on this machine.
 * For each drafter, on the same prompt and the same number of tokens: decode tok/s against plain
 * decoding in the same run, whether the reply is the same (greedy), the acceptance (accepted /
 * drafted, and accepted / tested, llama.cpp's), the tokens a model pass gives, a draft step's and
 * a verify pass's cost against one decode step, and the acceptance at which drafting breaks even.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/speculate.h"
#include "bench.h"

typedef struct {
    double secs; /* the whole generation */
    int *ids;    /* what it made */
    spec_stats st;
} gen_run;

/* n tokens after the prompt ids[0..prompt) (room for prompt + n), plainly (d NULL) or
 * speculatively, timed from the first decode step */
static int generate(loaded_model *lm, drafter *d, const sampler_params *sp, int *ids, int prompt,
                    int n, gen_run *g)
{
    gpt2_model *m = &lm->model;
    kv_seq *c = kv_seq_new(lm->pool, 0);
    spec *s = d ? spec_new(m, lm->backend, d) : NULL;
    sampler smp;
    sampler_init(&smp, sp);
    int len = prompt, next, made = 0, rc = -1;
    kb_sample pick = sampler_draw(&smp, ids, len);
    if (!c || (d && !s) || gpt2_step(m, lm->backend, c, ids, len, &pick, &next, NULL))
        goto out;
    double t0 = ev_clock();
    while (made < n) {
        ids[len++] = g->ids[made++] = next;
        if (made == n)
            break;
        if (s) {
            if (spec_next(s, c, ids, len, &smp, n - made, &next, NULL))
                goto out;
        } else {
            pick = sampler_draw(&smp, ids, len);
            if (gpt2_step(m, lm->backend, c, ids + len - 1, 1, &pick, &next, NULL))
                goto out;
        }
    }
    g->secs = ev_clock() - t0;
    if (s)
        g->st = *spec_get_stats(s);
    rc = 0;
out:
    spec_free(s);
    kv_seq_free(c);
    return rc;
}

/* out[i]: the median seconds of a pass of i positions after ctx cached ones, i = 1..most (1: a
 * decode step), the context prefilled once */
static int time_passes(loaded_model *lm, const int *ids, int ctx, int most, int runs, double *out)
{
    kv_seq *c = kv_seq_new(lm->pool, 0);
    float *logits = malloc(sizeof(float) * (size_t)lm->model.cfg.vocab_size * (size_t)most);
    double t[65];
    int rc = !c || !logits || gpt2_forward(&lm->model, lm->backend, c, ids, ctx, NULL) ? -1 : 0;
    for (int n = 1; !rc && n <= most; n++) {
        for (int r = 0; !rc && r <= runs; r++) { /* run 0 warms up */
            double t0 = ev_clock();
            rc = gpt2_verify(&lm->model, lm->backend, c, ids + ctx, n, logits) ||
                 kv_truncate(c, ctx);
            t[r] = ev_clock() - t0;
        }
        if (!rc)
            out[n] = bench_median(t + 1, runs);
    }
    free(logits);
    kv_seq_free(c);
    return rc;
}

/* The acceptance a at which a round of k drafts, each kept with chance a, gives as many tokens a
 * second as plain decoding: (1 - a^(k+1)) / (1 - a) tokens for one verify pass and k draft steps,
 * against one token a decode step. Above 1 when drafting cannot pay. */
static double break_even(int k, double verify, double draft_step, double step)
{
    double cost = (verify + k * draft_step) / step, lo = 0, hi = 1;
    if (cost <= 1)
        return 0;
    if (k + 1 < cost)
        return INFINITY;
    for (int i = 0; i < 60; i++) {
        double a = (lo + hi) / 2, tokens = (1 - pow(a, k + 1)) / (1 - a);
        *(tokens < cost ? &lo : &hi) = a;
    }
    return hi;
}

int bench_speculative(loaded_model *lm, const model_opts *mo, const char *drafters,
                      const draft_opts *base, int runs, const char *json_path)
{
    int n = mo->n_predict > 0 ? mo->n_predict : 128, V = lm->model.cfg.vocab_size, rc = 0;
    int W = kv_pool_opts(lm->pool)->window, k = base->max;
    int prompt = W - n - DRAFT_MAX_TOKENS - 1 < 64 ? W - n - DRAFT_MAX_TOKENS - 1 : 64;
    if (prompt < 1)
        return err_set("bench --speculative: -n %d leaves no room for a prompt in a window of %d "
                       "(it keeps %d positions for a round's drafts)",
                       n, W, DRAFT_MAX_TOKENS + 1);
    int *ids = malloc(sizeof(int) * (size_t)W), *plain_ids = malloc(sizeof(int) * (size_t)n);
    int *spec_ids = malloc(sizeof(int) * (size_t)n);
    json_t *rows = json_array();
    if (!ids || !plain_ids || !spec_ids)
        rc = err_set("out of memory for bench --speculative");
    uint64_t s = 42;
    for (int i = 0; i < W; i++) { /* the fixed prompt of kvchat bench */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int)((s >> 33) % (uint64_t)V);
    }
    /* the costs: a decode step and verify passes of 2..k+1 positions, midway through the reply */
    double verify[DRAFT_MAX_TOKENS + 2] = {0};
    if (!rc)
        rc = time_passes(lm, ids, prompt + n / 2, k + 1, runs, verify);
    double step = verify[1];
    gen_run plain = {.ids = plain_ids};
    if (!rc)
        rc = generate(lm, NULL, &mo->sp, ids, prompt, n, &plain);
    if (!rc) {
        printf("a decode step: %.2f ms; a verify pass of", step * 1e3);
        for (int i = 2; i <= k + 1; i++)
            printf(" %d: %.2fx", i, verify[i] / step);
        printf(" a step (target for 5 or fewer: at most 1.4x)\n");
        printf("plain decoding: %d tokens after a prompt of %d at %.1f tok/s\n\n", n, prompt,
               n / plain.secs);
        printf("%-12s %7s %9s %9s %8s %10s %10s %9s %6s %11s\n", "drafter", "tok/s", "speedup",
               "accepted", "tested", "tok/pass", "draft/step", "verify/step", "same", "break-even");
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", drafters);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && !rc;
         t = strtok_r(NULL, ",", &save)) {
        draft_opts o = *base;
        if (draft_parse(t, &o)) {
            rc = -1;
            break;
        }
        drafter *d = draft_new(&o, &lm->model, lm->dir, lm->backend, lm->pool, 1);
        gen_run g = {.ids = spec_ids};
        if (!d || generate(lm, d, &mo->sp, ids, prompt, n, &g)) {
            draft_free(d);
            rc = -1;
            break;
        }
        const spec_stats *st = &g.st;
        double acc = st->drafted ? (double)st->accepted / st->drafted : 0,
               tested = st->tested ? (double)st->accepted / st->tested : 0,
               per_pass = st->rounds ? (double)st->made / st->rounds : 0,
               draft_step = st->drafted ? st->draft_s / st->drafted : 0,
               verify_pass = st->rounds ? st->verify_s / st->rounds : 0,
               mean_k = st->rounds ? (double)st->drafted / st->rounds : 0;
        int same = !memcmp(plain_ids, spec_ids, sizeof(int) * (size_t)n);
        double even = break_even((int)lround(mean_k), verify_pass, draft_step, step);
        char even_s[32];
        snprintf(even_s, sizeof even_s, isinf(even) ? "never" : "%.2f", even);
        printf("%-12.12s %7.1f %8.2fx %8.0f%% %7.0f%% %10.2f %10.2f %10.2f %6s %11s\n",
               draft_name(&o), n / g.secs, plain.secs / g.secs, acc * 100, tested * 100, per_pass,
               draft_step / step, verify_pass / step,
               mo->sp.temp > 0 ? "-"
               : same          ? "yes"
                               : "NO",
               even_s);
        json_t *row = json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "drafter",
                                draft_name(&o), "tok_s", n / g.secs, "plain_tok_s", n / plain.secs,
                                "acceptance", acc, "acceptance_tested", tested, "tokens_per_pass",
                                per_pass, "draft_step_cost", draft_step / step, "verify_pass_cost",
                                verify_pass / step, "same_reply", same);
        json_object_set_new(row, "break_even_acceptance",
                            isinf(even) ? json_null() : json_real(even)); /* null: never */
        json_array_append_new(rows, row);
        draft_free(d);
    }
    if (!rc && json_path) {
        json_t *doc = json_pack("{s:i, s:f, s:O}", "tokens", n, "decode_step_ms", step * 1e3,
                                "drafters", rows);
        if (json_dump_file(doc, json_path, JSON_INDENT(2)))
            rc = err_set("--json %s: cannot write", json_path);
        json_decref(doc);
    }
    json_decref(rows);
    free(ids);
    free(plain_ids);
    free(spec_ids);
    return rc;
}
