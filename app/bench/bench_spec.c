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
#include "../chat/template.h"
#include "../safe_text.h"
#include "bench.h"
#include "bench_convs.h"
#include "bench_stats.h"

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

/* the prompts: each chat of --chats written as the gpt2 template writes it, up to its last reply
 * ("Assistant:"), its last `room` tokens; or one fixed prompt of random ids (no chats) */
typedef struct {
    int **ids; /* each with room for its prompt and n tokens */
    int *len, count;
} prompts;

static int chat_prompt(loaded_model *lm, const bench_conv *c, int room, int n, prompts *p)
{
    int *ids = NULL, len = 0, cap = 0, rc = tpl_preamble(TPL_GPT2, lm->tok, NULL, &ids, &len, &cap);
    for (int t = 0; t < c->n && !rc; t++) {
        rc = tpl_user(TPL_GPT2, lm->tok, c->msgs[t], strlen(c->msgs[t]), t == 0, &ids, &len, &cap);
        if (t + 1 < c->n && !rc && c->replies) {
            char *reply = err_malloc(strlen(c->replies[t]) + 2, "a reply");
            rc = reply ? 0 : -1;
            if (reply) {
                sprintf(reply, " %s", c->replies[t]);
                rc = tok_encode(lm->tok, reply, strlen(reply), 0, &ids, &len, &cap);
                free(reply);
            }
        }
    }
    int from = len > room ? len - room : 0, *mine = NULL;
    if (!rc && !(mine = err_malloc(sizeof *mine * (size_t)(len - from + n), "a prompt")))
        rc = -1;
    if (!rc) {
        memcpy(mine, ids + from, sizeof *mine * (size_t)(len - from));
        p->ids[p->count] = mine;
        p->len[p->count++] = len - from;
    }
    free(ids);
    return rc;
}

static void prompts_free(prompts *p)
{
    for (int i = 0; i < p->count; i++)
        free(p->ids[i]);
    free(p->ids);
    free(p->len);
}

static int prompts_make(loaded_model *lm, const char *chats, int room, int n, prompts *p)
{
    bench_conv *convs = NULL;
    int count = 1, V = lm->model.cfg.vocab_size;
    memset(p, 0, sizeof *p);
    if (chats && bench_convs_read(NULL, chats, NULL, &convs, &count))
        return -1;
    p->ids = err_calloc((size_t)count, sizeof *p->ids, "the prompts");
    p->len = err_calloc((size_t)count, sizeof *p->len, "the prompts");
    int rc = p->ids && p->len ? 0 : -1;
    for (int i = 0; chats && i < count && !rc; i++)
        rc = chat_prompt(lm, &convs[i], room, n, p);
    if (!chats && !rc && !(p->ids[0] = err_malloc(sizeof(int) * (size_t)(room + n), "a prompt")))
        rc = -1;
    if (!chats && !rc) { /* the fixed prompt of kvchat bench */
        uint64_t s = 42;
        for (int i = 0; i < room; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            p->ids[0][i] = (int)((s >> 33) % (uint64_t)V);
        }
        p->len[0] = room, p->count = 1;
    }
    bench_convs_free(convs, chats ? count : 0);
    if (rc)
        prompts_free(p);
    return rc;
}

/* the pooled acceptance of the prompts resampled (bench_stats.h's figure) */
static double acceptance(const void *ctx, const int *times)
{
    const spec_stats *st = ctx;
    double kept = 0, drafted = 0;
    for (int i = 0; st[i].rounds >= 0; i++) {
        double t = times ? times[i] : 1;
        kept += t * st[i].accepted, drafted += t * st[i].drafted;
    }
    return drafted ? kept / drafted : 0;
}

/* what one drafter measured over the prompts and runs */
typedef struct {
    double *plain, *spec; /* [runs]: the seconds of all prompts' replies in each run */
    spec_stats *per;      /* [prompts + 1]: each prompt's (the last rounds = -1) */
    spec_stats all;
    int same; /* every greedy reply plain decoding's */
} drafter_run;

static int run_drafter(loaded_model *lm, drafter *d, const model_opts *mo, const prompts *p, int n,
                       int runs, int *plain_ids, int *spec_ids, drafter_run *out)
{
    out->same = 1;
    for (int r = 0; r < runs; r++) /* plain and drafted alternate: the machine's pace moves */
        for (int i = 0; i < p->count; i++) {
            gen_run plain = {.ids = plain_ids}, g = {.ids = spec_ids};
            if (generate(lm, NULL, &mo->sp, p->ids[i], p->len[i], n, &plain) ||
                generate(lm, d, &mo->sp, p->ids[i], p->len[i], n, &g))
                return -1;
            out->plain[r] += plain.secs, out->spec[r] += g.secs;
            out->same &= !memcmp(plain_ids, spec_ids, sizeof(int) * (size_t)n);
            if (r == 0) { /* every run draws the same rounds */
                out->per[i] = g.st;
                out->all.rounds += g.st.rounds, out->all.drafted += g.st.drafted;
                out->all.accepted += g.st.accepted, out->all.tested += g.st.tested;
                out->all.made += g.st.made;
                out->all.draft_s += g.st.draft_s, out->all.verify_s += g.st.verify_s;
            }
        }
    out->per[p->count].rounds = -1;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* one drafter's line and JSON row */
static int report(const draft_opts *o, const drafter_run *dr, const prompts *p, int n, int runs,
                  double step, int greedy, json_t *rows)
{
    double ratio[64], ci[2];
    for (int r = 0; r < runs; r++)
        ratio[r] = dr->plain[r] / dr->spec[r];
    qsort(ratio, (size_t)runs, sizeof *ratio, cmp_double);
    double speed = bench_median(ratio, runs), tokens = (double)n * p->count;
    double spec_secs = bench_median(dr->spec, runs);
    const spec_stats *st = &dr->all;
    double acc = acceptance(dr->per, NULL),
           tested = st->tested ? (double)st->accepted / st->tested : 0,
           per_pass = st->rounds ? (double)st->made / st->rounds : 0,
           draft_step = st->drafted ? st->draft_s / st->drafted : 0,
           verify_pass = st->rounds ? st->verify_s / st->rounds : 0,
           mean_k = st->rounds ? (double)st->drafted / st->rounds : 0;
    if (bs_interval(acceptance, dr->per, p->count, 2000, 7, ci))
        return -1;
    double even = break_even((int)lround(mean_k), verify_pass, draft_step, step);
    char even_s[16], acc_s[32], speed_s[40], name[4200];
    const char *slash = strrchr(draft_name(o), '/'); /* a directory: its last part */
    safe_copy(name, sizeof name, slash && slash[1] ? slash + 1 : draft_name(o));
    snprintf(even_s, sizeof even_s, isinf(even) ? "never" : "%.2f", even);
    snprintf(acc_s, sizeof acc_s, "%.0f%% [%.0f,%.0f]", 100 * acc, 100 * ci[0], 100 * ci[1]);
    /* fewer decimals past 10x, so that a busy machine's wide spread keeps the row in 80 columns */
    int dp = ratio[runs - 1] >= 99.95 ? 0 : ratio[runs - 1] >= 9.995 ? 1 : 2;
    snprintf(speed_s, sizeof speed_s, "%.*fx [%.*f,%.*f]", dp, speed, dp, ratio[0], dp,
             ratio[runs - 1]);
    printf("%-7.7s %5.0f %-17s %-14s %4.0f%% %5.2f %5.2f %5.2f %3s %5s\n", name, tokens / spec_secs,
           speed_s, acc_s, tested * 100, per_pass, draft_step / step, verify_pass / step,
           greedy ? (dr->same ? "yes" : "NO") : "-", even_s);
    json_t *row =
        json_pack("{s:s, s:f, s:f, s:[f,f], s:f, s:[f,f], s:f, s:f, s:f, s:f}", "drafter",
                  draft_name(o), "tok_s", tokens / spec_secs, "speedup", speed, "speedup_range",
                  ratio[0], ratio[runs - 1], "acceptance", acc, "acceptance_95", ci[0], ci[1],
                  "acceptance_tested", tested, "tokens_per_pass", per_pass, "draft_step_cost",
                  draft_step / step, "verify_pass_cost", verify_pass / step);
    json_object_set_new(row, "same_reply", greedy ? json_boolean(dr->same) : json_null());
    json_object_set_new(row, "break_even_acceptance", isinf(even) ? json_null() : json_real(even));
    return json_array_append_new(rows, row);
}

/* the drafters of the list, each made before anything is measured (a bad one fails at once) */
static int drafters_make(loaded_model *lm, char *buf, const draft_opts *base, draft_opts *opts,
                         drafter **ds, int *count)
{
    *count = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*count == 8)
            return err_set("--draft: at most 8 drafters at a time");
        opts[*count] = *base;
        if (draft_parse(t, &opts[*count]) ||
            !(ds[*count] = draft_new(&opts[*count], &lm->model, lm->dir, lm->backend, lm->pool, 1)))
            return -1;
        ++*count;
    }
    return *count ? 0 : err_set("--draft: no drafter named");
}

int bench_speculative(loaded_model *lm, const model_opts *mo, const char *list,
                      const draft_opts *base, const char *chats, int runs, const char *json_path)
{
    int n = mo->n_predict > 0 ? mo->n_predict : 128, rc = 0, W = kv_pool_opts(lm->pool)->window;
    int k = base->max, room = W - n - DRAFT_MAX_TOKENS - 1 < (chats ? 384 : 64)
                                  ? W - n - DRAFT_MAX_TOKENS - 1
                                  : (chats ? 384 : 64);
    if (room < 1)
        return err_set("bench --speculative: -n %d leaves no room for a prompt in a window of %d "
                       "(it keeps %d positions for a round's drafts)",
                       n, W, DRAFT_MAX_TOKENS + 1);
    char names[1024]; /* cut into the drafters' names, which their options point into */
    snprintf(names, sizeof names, "%s", list);
    draft_opts opts[8];
    drafter *ds[8] = {0};
    int n_ds = 0;
    prompts p = {0};
    double verify[DRAFT_MAX_TOKENS + 2] = {0};
    int *plain_ids = malloc(sizeof(int) * (size_t)n), *spec_ids = malloc(sizeof(int) * (size_t)n);
    json_t *rows = json_array();
    if (!plain_ids || !spec_ids)
        rc = err_set("out of memory for bench --speculative");
    if (!rc)
        rc =
            drafters_make(lm, names, base, opts, ds, &n_ds) || prompts_make(lm, chats, room, n, &p);
    /* the costs: a decode step and verify passes of 2..k+1 positions, midway through a reply of
     * the fixed prompt */
    prompts fixed = {0};
    if (!rc && !(rc = prompts_make(lm, NULL, room + n + DRAFT_MAX_TOKENS + 1, 0, &fixed)))
        rc = time_passes(lm, fixed.ids[0], room + n / 2, k + 1, runs, verify);
    if (fixed.ids)
        prompts_free(&fixed);
    if (!rc) {
        printf("a decode step: %.2f ms; a verify pass of", verify[1] * 1e3);
        for (int i = 2; i <= k + 1; i++)
            printf(" %d: %.2fx", i, verify[i] / verify[1]);
        printf(" a step\n(targets: 2-3 positions at most 1.4x a step on 2 threads, 5 on 4 or "
               "more)\n");
        printf("%d %s, %d tokens each (%s), %d runs alternating plain and drafted decoding\n\n",
               p.count, chats ? "chats" : "prompt", n, mo->sp.temp > 0 ? "sampled" : "greedy",
               runs);
        /* 80 columns: a terminal's width (it was 102) */
        printf("%-7s %5s %-17s %-14s %5s %5s %5s %5s %3s %5s\n", "drafter", "tok/s",
               "speedup [min,max]", "accepted [95%]", "acc/t", "tok/p", "draft", "check", "=",
               "break");
    }
    for (int i = 0; i < n_ds && !rc; i++) {
        drafter_run dr = {.plain = calloc((size_t)runs, sizeof(double)),
                          .spec = calloc((size_t)runs, sizeof(double)),
                          .per = calloc((size_t)p.count + 1, sizeof(spec_stats))};
        rc = !dr.plain || !dr.spec || !dr.per ? err_set("out of memory for bench --speculative")
             : run_drafter(lm, ds[i], mo, &p, n, runs, plain_ids, spec_ids, &dr) ||
                     report(&opts[i], &dr, &p, n, runs, verify[1], mo->sp.temp <= 0, rows)
                 ? -1
                 : 0;
        free(dr.plain);
        free(dr.spec);
        free(dr.per);
    }
    if (!rc)
        printf("\n(acc/t: accepted of those tested, as llama.cpp counts; tok/p: tokens a\n"
               "model pass; draft, check: a draft step's and a verify pass's cost in decode\n"
               "steps; =: the reply is plain decoding's; break: the acceptance at which\n"
               "drafting breaks even)\n");
    if (!rc && json_path) {
        json_t *doc = json_pack("{s:i, s:i, s:i, s:f, s:O}", "tokens", n, "prompts", p.count,
                                "runs", runs, "decode_step_ms", verify[1] * 1e3, "drafters", rows);
        if (json_dump_file(doc, json_path, JSON_INDENT(2)))
            rc = err_set("--json %s: cannot write", json_path);
        json_decref(doc);
    }
    for (int i = 0; i < n_ds; i++)
        draft_free(ds[i]);
    if (p.ids)
        prompts_free(&p);
    json_decref(rows);
    free(plain_ids);
    free(spec_ids);
    return rc;
}
