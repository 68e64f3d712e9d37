/* kvchat bench --policy --text FILE: the text track. Documents of the model's positions, taken
 * evenly through a held-out text, are read token by token by a run that keeps everything (the
 * reference) and, at each cache budget, by runs that keep at most that many tokens between steps,
 * one per rule: kvchat's own (exact: the oldest quarter of the budget goes and what remains is
 * computed again at new positions; shift: the same without recomputing, approximate) and the
 * literature's token-level rules as baselines (window; four sinks and a window, StreamingLLM's;
 * H2O, the tokens with the most attention received so far beside a recent half; TOVA, the last
 * token's attention). Those drop tokens without recomputing the rest, and the next tokens go in at
 * their true positions (gpt2_model.pos_offset): exact inside the model's positions, where GPT-2's
 * learned positions are never reused. At every token whose run has lost history: KL(full || rule),
 * top-1 agreement and both runs' loss, pooled over the documents with bootstrap intervals. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../files.h"
#include "../safe_text.h"
#include "bench.h"
#include "bench_convs.h"
#include "bench_stats.h"
#include "policy_gates.h"

enum { R_EXACT, R_SHIFT, R_WINDOW, R_SINKS, R_H2O, R_TOVA, N_RULES };
static const char *const RULE[N_RULES] = {"exact",        "shift", "window",
                                          "sinks+window", "H2O",   "TOVA"};
enum { SINKS = 4 };

/* one rule at one budget: its run over the document in progress, and its figures so far */
typedef struct {
    int rule, budget;
    kv_seq *cache;
    int *pos;      /* each cached token's position in the document */
    double *score; /* H2O: the attention each cached token has received */
    int lost;      /* tokens dropped from this document so far */
    double secs, worst;
    bs_sums *units; /* per document, over the tokens its run had lost history at */
    long recomputed;
    bs_values kls;
    json_t *docs, *drops, *kl, *top1, *nll;
} rule_run;

typedef struct {
    loaded_model *lm;
    kv_pool *pool;
    const int *ids; /* the document in progress */
    int P, V, L, H, n_docs, n_runs;
    rule_run *runs;
    double *p_full, *acc_full; /* acc_full: attention each position received so far */
    bs_ref full;               /* p_full's figures */
    double lp_full;            /* and the next token's log-probability in it */
    float *logits, *mass;
    int *spans, *kept;
    double sink, sink_uniform; /* the sink's sums, from the full runs */
    long sink_steps;
} text_bench;

static double mean_mass(const text_bench *tb, int span, int n_spans)
{
    double s = 0;
    for (int k = 0; k < tb->L * tb->H; k++)
        s += tb->mass[(size_t)k * n_spans + span];
    return s / (tb->L * tb->H);
}

/* one token through a cache: with probe, each cached token's mean attention in tb->mass */
static int step(text_bench *tb, kv_seq *c, int id, int pos_offset, int probe, float *logits)
{
    gpt2_model *m = &tb->lm->model;
    int len = kv_len(c);
    kb_probe pr = {.start = tb->spans, .n_spans = len + 1, .mass = tb->mass};
    m->pos_offset = pos_offset;
    m->probe = probe ? &pr : NULL;
    int rc = gpt2_forward(m, tb->lm->backend, c, &id, 1, logits);
    m->probe = NULL;
    m->pos_offset = 0;
    return rc;
}

static void drop_at(rule_run *r, int at, int n)
{
    int len = kv_len(r->cache);
    memmove(r->pos + at, r->pos + at + n, sizeof *r->pos * (size_t)(len - at - n));
    if (r->score)
        memmove(r->score + at, r->score + at + n, sizeof *r->score * (size_t)(len - at - n));
}

/* Brings the run back to its budget by its rule, after a step left it one over. */
static int evict(text_bench *tb, rule_run *r, int t)
{
    int len = kv_len(r->cache), B = r->budget, at = 0, n = 1;
    if (r->rule == R_EXACT || r->rule == R_SHIFT) {
        n = B / 4 > 0 ? B / 4 : 1;
    } else if (r->rule == R_SINKS) {
        at = SINKS;
    } else if (r->rule == R_H2O || r->rule == R_TOVA) {
        int last = r->rule == R_H2O ? len - B / 2 : len; /* H2O never drops its recent half */
        for (int j = 1; j < last; j++)
            if (r->rule == R_H2O ? r->score[j] < r->score[at]
                                 : mean_mass(tb, j, len) < mean_mass(tb, at, len))
                at = j;
    }
    json_t *gone = json_array();
    for (int j = at; j < at + n; j++)
        json_array_append_new(gone, json_integer(r->pos[j]));
    json_array_append_new(r->drops, json_pack("[i, o]", t, gone));
    r->lost += n;
    if (r->rule == R_EXACT) { /* what remains, computed again at positions from 0 */
        for (int j = at + n; j < len; j++)
            tb->kept[j - at - n] = tb->ids[r->pos[j]];
        drop_at(r, at, n);
        r->recomputed += len - n;
        return kv_truncate(r->cache, 0) ||
               gpt2_forward(&tb->lm->model, tb->lm->backend, r->cache, tb->kept, len - n, NULL);
    }
    drop_at(r, at, n);
    return kv_shift(r->cache, at, at + n, len - at - n) || kv_truncate(r->cache, len - n);
}

/* Feeds token t to rule run r, compares its next-token distribution with the full run's (in
 * tb->p_full, top_full), then evicts when over its budget. */
static int rule_step(text_bench *tb, rule_run *r, int t, int top_full, int d)
{
    int len = kv_len(r->cache), probe = r->rule == R_H2O || r->rule == R_TOVA;
    /* the token-level rules keep positions; kvchat's go on from the cache's length */
    int offset = r->rule == R_EXACT || r->rule == R_SHIFT ? 0 : t - len;
    double t0 = ev_clock();
    if (step(tb, r->cache, tb->ids[t], offset, probe, tb->logits))
        return -1;
    r->pos[len] = t;
    if (r->rule == R_H2O) {
        r->score[len] = 0;
        for (int j = 0; j <= len; j++)
            r->score[j] += mean_mass(tb, j, len + 1);
    }
    int top;
    double lse = bs_lse(tb->logits, tb->V, &top);
    bs_sums *u = &r->units[d];
    if (r->lost) {
        double kl = bs_kl(tb->p_full, &tb->full, tb->logits, lse, tb->V),
               nll = lse - tb->logits[tb->ids[t + 1]];
        u->n++;
        u->n_nll++;
        u->top1 += top == top_full;
        u->kl += kl;
        u->nll += nll;
        u->nll_full += -tb->lp_full;
        if (bs_values_add(&r->kls, (float)kl, d))
            return -1;
        json_array_append_new(r->kl, json_real(kl));
        json_array_append_new(r->top1, json_boolean(top == top_full));
        json_array_append_new(r->nll, json_real(nll));
    }
    int rc = kv_len(r->cache) > r->budget ? evict(tb, r, t) : 0;
    double dt = ev_clock() - t0;
    r->secs += dt;
    r->worst = dt > r->worst ? dt : r->worst;
    return rc;
}

/* the full run's step at t: its distribution, the sink's sums and the attention received */
static int full_step(text_bench *tb, kv_seq *full, int t, int *top)
{
    if (step(tb, full, tb->ids[t], 0, 1, tb->logits))
        return -1;
    for (int j = 0; j <= t; j++)
        tb->acc_full[j] += mean_mass(tb, j, t + 1);
    if (t >= 1) {
        tb->sink += mean_mass(tb, 0, t + 1);
        tb->sink_uniform += 1.0 / (t + 1);
        tb->sink_steps++;
    }
    bs_softmax(tb->logits, tb->V, tb->p_full, &tb->full);
    tb->lp_full = tb->logits[tb->ids[t + 1]] - tb->full.lse;
    *top = tb->full.top;
    return 0;
}

static int run_start(text_bench *tb, rule_run *r, kv_seq *full)
{
    int B = r->budget;
    if (!(r->cache = kv_fork(full, 0)))
        return -1;
    for (int j = 0; j < B; j++)
        r->pos[j] = j;
    if (r->score)
        memcpy(r->score, tb->acc_full, sizeof *r->score * (size_t)B);
    r->lost = 0;
    r->drops = json_array();
    r->kl = json_array();
    r->top1 = json_array();
    r->nll = json_array();
    return 0;
}

static void run_end(rule_run *r)
{
    kv_seq_free(r->cache);
    r->cache = NULL;
    if (r->drops)
        json_array_append_new(r->docs, json_pack("{s:o, s:o, s:o, s:o}", "drops", r->drops, "kl",
                                                 r->kl, "top1", r->top1, "nll", r->nll));
    r->drops = r->kl = r->top1 = r->nll = NULL;
}

static int document(text_bench *tb, int d)
{
    kv_seq *full = kv_seq_new(tb->pool, 0);
    if (!full)
        return err_wrap("a document's cache");
    memset(tb->acc_full, 0, sizeof *tb->acc_full * (size_t)tb->P);
    int rc = 0, top;
    for (int t = 0; !rc && t + 1 < tb->P; t++) {
        for (int i = 0; !rc && i < tb->n_runs; i++)
            if (tb->runs[i].budget == t)
                rc = run_start(tb, &tb->runs[i], full);
        rc = rc || full_step(tb, full, t, &top);
        for (int i = 0; !rc && i < tb->n_runs; i++)
            if (tb->runs[i].cache)
                rc = rule_step(tb, &tb->runs[i], t, top, d);
    }
    for (int i = 0; i < tb->n_runs; i++)
        run_end(&tb->runs[i]);
    kv_seq_free(full);
    return rc;
}

/* each rule against exact (kvchat's oldest-first): the paired difference of their mean KL over the
 * documents, ranked only where the model's gates hold and its interval leaves out zero */
static const char *text_verdict(int rule, const double diff[2], int hold)
{
    if (rule == R_EXACT)
        return "(the default)";
    return policy_rank(diff, hold, "closer than exact", "further than exact");
}

static int print_budget(text_bench *tb, int B, uint64_t seed, int hold, json_t *out)
{
    const rule_run *exact = NULL;
    for (int i = 0; i < tb->n_runs; i++)
        if (tb->runs[i].budget == B && tb->runs[i].rule == R_EXACT)
            exact = &tb->runs[i];
    printf("\nbudget %d of %d positions (%.1f%%): over the tokens whose run had lost history "
           "(95%% intervals over the %d documents)\n",
           B, tb->P, 100.0 * B / tb->P, tb->n_docs);
    bs_row_head("rule");
    printf(" %-27s %10s %8s %8s  %s\n", "KL - exact [95%]", "recomputed", "time", "worst",
           "verdict");
    for (int i = 0; i < tb->n_runs; i++) {
        rule_run *r = &tb->runs[i];
        bs_row row;
        double d, ci[2];
        if (r->budget != B)
            continue;
        if (bs_row_of(r->units, tb->n_docs, &r->kls, seed, &row) ||
            bs_paired(r->units, exact->units, tb->n_docs, BS_KL, seed, &d, ci))
            return -1;
        const char *v = text_verdict(r->rule, ci, hold);
        char dc[64];
        bs_diff_cell(dc, sizeof dc, d, ci, 1, 4);
        bs_row_print(RULE[r->rule], &row);
        printf(" %-27s %10ld %7.2fs %6.1fms  %s\n", dc, r->recomputed, r->secs, 1e3 * r->worst, v);
        json_array_append_new(
            out,
            json_pack("{s:s, s:i, s:o, s:o, s:I, s:f, s:f, s:O, s:s}", "rule", RULE[r->rule],
                      "budget", B, "figures", bs_row_json(&row), "kl_vs_default",
                      bs_paired_json(d, ci), "recomputed", (json_int_t)r->recomputed, "seconds",
                      r->secs, "worst_step_seconds", r->worst, "documents", r->docs, "verdict", v));
    }
    return 0;
}

/* Before any comparison: the model's gates (policy_gates.h, the repeat gate on this same text),
 * and its attention on position 0 */
static int gates(text_bench *tb, const char *path, const char *recall, policy_gates *mg,
                 json_t *doc)
{
    double sink = tb->sink / tb->sink_steps, uniform = tb->sink_uniform / tb->sink_steps;
    if (policy_gates_run(tb->lm, path, recall, path, mg, doc))
        return -1;
    printf("the sink: position 0 gets %.1f%% of the attention (mean over layers, heads and "
           "steps; a uniform reading %.1f%%)\n",
           100 * sink, 100 * uniform);
    json_object_set_new(doc, "sink", json_pack("{s:f, s:f}", "sink", sink, "uniform", uniform));
    return 0;
}

int bench_text(loaded_model *lm, const char *path, const char *gate_recall, int n_docs,
               const char *json, uint64_t seed)
{
    const gpt2_config *cfg = &lm->model.cfg;
    text_bench tb = {.lm = lm,
                     .P = cfg->n_ctx,
                     .V = cfg->vocab_size,
                     .L = cfg->n_layer,
                     .H = cfg->n_head,
                     .n_docs = n_docs};
    int budgets[3] = {tb.P / 8, tb.P / 4, tb.P / 2}, *ids = NULL, n = 0, cap = 0, rc = -1;
    if (budgets[0] <= SINKS + 1)
        return err_set("the model's %d positions leave budgets too small for the text track "
                       "(%d at 12.5%%)",
                       tb.P, budgets[0]);
    size_t len = 0;
    FILE *f = fopen(path, "rb");
    char *text = f ? read_all(f, &len, path) : NULL, hex[65];
    if (!f)
        return err_set("--text %s: %s", path, strerror(errno));
    fclose(f);
    if (!text || tok_encode(lm->tok, text, len, 0, &ids, &n, &cap)) {
        free(text);
        return -1;
    }
    sha256_hex(text, len, hex);
    free(text);
    if (n < n_docs * tb.P) {
        free(ids);
        return err_set("--text %s: %d tokens hold %d documents of the model's %d positions, not "
                       "--documents %d",
                       path, n, n / tb.P, tb.P, n_docs);
    }
    tb.n_runs = 3 * N_RULES;
    tb.runs = calloc((size_t)tb.n_runs, sizeof *tb.runs);
    kv_opts o = *kv_pool_opts(lm->pool);
    o.window = tb.P;
    o.pool_bytes = kv_bytes_per_token(lm->pool) *
                   (size_t)(tb.P + N_RULES * (budgets[0] + budgets[1] + budgets[2]) +
                            (tb.n_runs + 1) * (o.block_tokens + 1));
    tb.pool = kv_pool_create(lm->backend, cfg, &o, NULL);
    tb.p_full = malloc(sizeof(double) * (size_t)tb.V);
    tb.acc_full = malloc(sizeof(double) * (size_t)tb.P);
    tb.logits = malloc(sizeof(float) * (size_t)tb.V);
    tb.mass = malloc(sizeof(float) * (size_t)tb.L * tb.H * (size_t)(tb.P + 1));
    tb.spans = malloc(sizeof(int) * (size_t)(tb.P + 2));
    tb.kept = malloc(sizeof(int) * (size_t)tb.P);
    int ok = tb.runs && tb.pool && tb.p_full && tb.acc_full && tb.logits && tb.mass && tb.spans &&
             tb.kept;
    for (int i = 0; ok && i < tb.n_runs; i++) {
        rule_run *r = &tb.runs[i];
        r->rule = i % N_RULES;
        r->budget = budgets[i / N_RULES];
        r->pos = malloc(sizeof(int) * (size_t)(r->budget + 1));
        r->score = r->rule == R_H2O ? malloc(sizeof(double) * (size_t)(r->budget + 1)) : NULL;
        r->units = calloc((size_t)n_docs, sizeof *r->units);
        r->docs = json_array();
        ok = r->pos && (r->rule != R_H2O || r->score) && r->units && r->docs;
    }
    json_t *doc = json_object(), *starts = json_array(), *rows = json_array();
    if (!ok) {
        if (tb.pool)
            err_set("out of memory for bench --policy --text");
        goto out;
    }
    for (int j = 0; j <= tb.P + 1; j++)
        tb.spans[j] = j;
    char shown[4 * PATH_MAX]; /* a file's name may hold escape sequences */
    printf("The text track: %d documents of %d tokens from %s (%d tokens, sha256 %.16s...), "
           "evenly spaced;\n",
           n_docs, tb.P, safe_copy(shown, sizeof shown, path), n, hex);
    bench_print_sources(path);

    printf("each read token by token in full, and at budgets of 12.5%%, 25%% and 50%% of the "
           "positions by each rule.\n");
    for (int d = 0; d < n_docs; d++) {
        tb.ids = ids + (size_t)d * (n / n_docs);
        json_array_append_new(starts, json_integer(d * (n / n_docs)));
        if (document(&tb, d))
            goto out;
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\rbench --policy --text: document %d of %d ", d + 1, n_docs);
    }
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\n");
    json_object_set_new(doc, "model", json_string(lm->dir));
    json_object_set_new(doc, "text", json_string(path));
    json_object_set_new(doc, "text_sha256", json_string(hex));
    json_object_set_new(doc, "positions", json_integer(tb.P));
    json_object_set_new(doc, "starts", json_incref(starts));
    policy_gates mg;
    if (gates(&tb, path, gate_recall, &mg, doc))
        goto out;
    for (int b = 0; b < 3; b++)
        if (print_budget(&tb, budgets[b], seed, mg.holds, rows))
            goto out;
    json_object_set_new(doc, "rules", json_incref(rows));
    rc = json && json_dump_file(doc, json, JSON_COMPACT) ? err_set("--json %s: cannot write", json)
                                                         : 0;
out:
    for (int i = 0; tb.runs && i < tb.n_runs; i++) {
        rule_run *r = &tb.runs[i];
        run_end(r);
        free(r->pos);
        free(r->score);
        free(r->units);
        bs_values_free(&r->kls);
        json_decref(r->docs);
    }
    json_decref(doc);
    json_decref(starts);
    json_decref(rows);
    kv_pool_free(tb.pool);
    free(tb.runs);
    free(tb.p_full);
    free(tb.acc_full);
    free(tb.logits);
    free(tb.mass);
    free(tb.spans);
    free(tb.kept);
    free(ids);
    return rc;
}
