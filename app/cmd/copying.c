/* kvchat perplexity --repeat and --recall: does the model copy from far back? The ability that
 * makes eviction matter, measured where the text cannot decide the result:
 *   repeat  passages of a text read once, then again after 150-300 tokens of the text that follows
 *           them: the mean loss of the second reading (from its third token on) against the same
 *           tokens' at the first. A model that copies drops by nats; one that does not, by almost
 *           nothing, whatever the text.
 *   recall  chats that state a fact first and ask for it later (tests/train/corpus.py's
 *           heldout-recall.jsonl): top-1 accuracy of the answer's fill tokens with the fact in the
 *           window, and in the same chat with the fact's exchange removed (the fact never said).
 * Each figure with a bootstrap 95% interval over passages or chats (bench_stats.h). */
#include "copying.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../chat/template.h"
#include "../bench/bench_convs.h"
#include "../bench/bench_stats.h"

enum { PASSAGE = 100, GAP_MIN = 150, GAP_MAX = 300, SKIP = 2, CHUNK = 64, RESAMPLES = 2000 };

/* what a unit (a passage, a chat) adds to a figure: two sums over the same n tokens */
typedef struct {
    double a, b;
    long n;
} unit;

typedef struct {
    const unit *u;
    int which; /* 0: a's mean, 1: b's, 2: a's less b's */
} pooled;

static double pooled_mean(const void *ctx, const int *times)
{
    const pooled *p = ctx;
    double a = 0, b = 0, n = 0;
    for (int i = 0; p->u[i].n >= 0; i++) {
        double t = times ? times[i] : 1;
        a += t * p->u[i].a, b += t * p->u[i].b, n += t * p->u[i].n;
    }
    if (!n)
        return NAN;
    return p->which == 0 ? a / n : p->which == 1 ? b / n : (a - b) / n;
}

/* the figure over all units and its interval; units ends with n = -1 */
static int figure(const unit *units, int n, int which, double *fig, double ci[2])
{
    pooled p = {units, which};
    *fig = pooled_mean(&p, NULL);
    return bs_interval(pooled_mean, &p, n, RESAMPLES, 0x5eed + (uint64_t)which, ci);
}

/* the losses of seq's first and last `ends` tokens (the two readings; the rows between only fill
 * the cache) from a fresh cache, in passes of CHUNK rows */
static int losses(loaded_model *lm, const int *seq, int len, int ends, float *rows, double *out)
{
    int V = lm->model.cfg.vocab_size, rc = 0;
    kv_seq *cache = kv_seq_new(lm->pool, 0);
    if (!cache)
        return err_wrap("a passage's cache");
    for (int at = 0; at < len - 1 && !rc; at += CHUNK) {
        int k = len - 1 - at < CHUNK ? len - 1 - at : CHUNK;
        rc = gpt2_verify(&lm->model, lm->backend, cache, seq + at, k, rows);
        for (int r = 0, p = at + 1; r < k && !rc; r++, p++) {
            if (p >= ends && p < len - ends)
                continue;
            const float *row = rows + (size_t)r * V;
            out[p] = bs_lse(row, V, NULL) - row[seq[p]];
        }
    }
    kv_seq_free(cache);
    return rc;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int copy_repeat(loaded_model *lm, const int *ids, int n, int max_passages, int quiet,
                copy_figures *out)
{
    int ctx = kv_pool_opts(lm->pool)->window, V = lm->model.cfg.vocab_size;
    int most = 2 * PASSAGE + GAP_MAX, rc = -1, count = 0;
    if (ctx < 2 * PASSAGE + GAP_MIN)
        return err_set("--repeat: a window of %d positions; a passage, %d tokens of other text and "
                       "the passage again take %d",
                       ctx, GAP_MIN, 2 * PASSAGE + GAP_MIN);
    unit *units = err_malloc(sizeof *units * (size_t)(n / (PASSAGE + GAP_MIN) + 1), "passages");
    float *rows = err_malloc(sizeof *rows * (size_t)CHUNK * V, "a pass's logits");
    double *loss;
    int *seq = err_malloc(sizeof *seq * (size_t)most, "a passage");
    loss = err_malloc(sizeof *loss * (size_t)most, "a passage's losses");
    if (!units || !rows || !seq || !loss)
        goto out;
    rc = 0;
    for (long s = 0; !rc && count != max_passages; count++) {
        int gap = GAP_MIN + (int)(mix((uint64_t)count) % (GAP_MAX - GAP_MIN + 1));
        if (2 * PASSAGE + gap > ctx)
            gap = ctx - 2 * PASSAGE;
        if (s + PASSAGE + gap > n)
            break;
        memcpy(seq, ids + s, sizeof *seq * (size_t)(PASSAGE + gap));
        memcpy(seq + PASSAGE + gap, ids + s, sizeof *seq * PASSAGE);
        rc = losses(lm, seq, 2 * PASSAGE + gap, PASSAGE, rows, loss);
        unit *u = &units[count];
        *u = (unit){0, 0, PASSAGE - SKIP};
        for (int j = SKIP; j < PASSAGE; j++)
            u->a += loss[j], u->b += loss[PASSAGE + gap + j];
        s += PASSAGE + gap;
        if (!quiet)
            fprintf(stderr, "\rrepeat: %d passages", count + 1);
    }
    if (!quiet)
        fputc('\n', stderr);
    if (!rc && !count)
        rc = err_set("--repeat: the text holds %d tokens, too few for one passage (%d)", n,
                     2 * PASSAGE + GAP_MIN);
    if (rc)
        goto out;
    units[count].n = -1;
    double first, second, drop, ci_drop[2], ci[2];
    if (figure(units, count, 0, &first, ci) || figure(units, count, 1, &second, ci) ||
        figure(units, count, 2, &drop, ci_drop)) {
        rc = -1;
        goto out;
    }
    printf("repeat: %d passages of %d tokens, each read again after %d-%d tokens of the text that "
           "follows it\n",
           count, PASSAGE, GAP_MIN, GAP_MAX);
    printf("repeat: loss %.3f at the first reading, %.3f at the second (tokens 3-%d): a drop of "
           "%.3f nats [95%% %.3f, %.3f]\n",
           first, second, PASSAGE, drop, ci_drop[0], ci_drop[1]);
    int holds = drop >= 1.0 && ci_drop[0] > 0.5;
    printf("repeat gate (a drop of at least 1.0 nat, its interval above 0.5): %s\n",
           holds ? "holds" : "fails");
    if (out)
        *out = (copy_figures){
            .drop = drop, .ci = {ci_drop[0], ci_drop[1]}, .passages = count, .holds = holds};
out:
    free(units);
    free(rows);
    free(seq);
    free(loss);
    return rc;
}

/* the chat's tokens up to the answer (the first exchange left out when `drop`), and the answer's
 * tokens with which of them hold the fill */
static int recall_tokens(loaded_model *lm, const bench_conv *c, int drop, int **ids, int *n,
                         int *cap, int *answer_at)
{
    const tokenizer *tok = lm->tok;
    *n = 0;
    if (tpl_preamble(TPL_GPT2, tok, NULL, ids, n, cap))
        return -1;
    for (int t = drop; t < c->n; t++) {
        const char *msg = c->msgs[t], *reply = c->replies[t];
        if (tpl_user(TPL_GPT2, tok, msg, strlen(msg), t == drop, ids, n, cap))
            return -1;
        if (t == c->n - 1)
            *answer_at = *n;
        size_t len = strlen(reply);
        char *text = err_malloc(len + 2, "a reply");
        if (!text)
            return -1;
        text[0] = ' ';
        memcpy(text + 1, reply, len + 1);
        int rc = tok_encode(tok, text, len + 1, 0, ids, n, cap);
        free(text);
        if (rc)
            return -1;
    }
    return 0;
}

/* correct top-1 guesses of the fill tokens in one chat, and how many there were; 1: the chat does
 * not fit the window */
static int recall_one(loaded_model *lm, const bench_conv *c, int drop, float *rows, double *right,
                      long *count)
{
    int *ids = NULL, n = 0, cap = 0, at = 0, V = lm->model.cfg.vocab_size, rc;
    int ctx = kv_pool_opts(lm->pool)->window;
    unsigned char *is_fill = NULL;
    *right = 0, *count = 0;
    if ((rc = recall_tokens(lm, c, drop, &ids, &n, &cap, &at)))
        goto out;
    if (n > ctx) { /* left out, and counted */
        rc = 1;
        goto out;
    }
    kv_seq *cache = kv_seq_new(lm->pool, 0);
    if (!(is_fill = err_malloc((size_t)(n - at), "the answer's fill")) || !cache ||
        gpt2_forward(&lm->model, lm->backend, cache, ids, at, rows)) {
        rc = cache || !is_fill ? -1 : err_wrap("a recall chat's cache");
        kv_seq_free(cache);
        goto out;
    }
    *count = bench_conv_fill(lm->tok, c, ids + at, n - at, 1, is_fill); /* after its space */
    for (int k = 0; at + k < n && !rc; k++) {
        if (is_fill[k]) {
            int top;
            bs_lse(rows, V, &top);
            *right += top == ids[at + k];
        }
        if (at + k + 1 < n)
            rc = gpt2_forward(&lm->model, lm->backend, cache, ids + at + k, 1, rows);
    }
    kv_seq_free(cache);
out:
    free(is_fill);
    free(ids);
    return rc;
}

static int recall_report(const unit *units, int n, int left_out, copy_figures *out)
{
    double with, without, gain, ci_with[2], ci_without[2], ci_gain[2], right[2] = {0, 0};
    long tokens = 0;
    if (figure(units, n, 0, &with, ci_with) || figure(units, n, 1, &without, ci_without) ||
        figure(units, n, 2, &gain, ci_gain))
        return -1;
    for (int i = 0; i < n; i++)
        tokens += units[i].n, right[0] += units[i].a, right[1] += units[i].b;
    printf("recall: %d chats, %ld fill tokens in their answers", n, tokens);
    printf(left_out ? " (%d chats longer than the window left out)\n" : "\n", left_out);
    printf("recall: top-1 with the fact in the window %.0f (%.1f%% [95%% %.1f, %.1f]), with it "
           "never said %.0f (%.1f%% [95%% %.1f, %.1f])\n",
           right[0], 100 * with, 100 * ci_with[0], 100 * ci_with[1], right[1], 100 * without,
           100 * ci_without[0], 100 * ci_without[1]);
    printf("recall: the fact adds %.1f points [95%% %.1f, %.1f]\n", 100 * gain, 100 * ci_gain[0],
           100 * ci_gain[1]);
    int holds = with >= 0.6 && gain >= 0.4;
    printf("recall gate (at least 60%% with the fact and 40 points above without it): %s\n",
           holds ? "holds" : "fails");
    if (out)
        *out = (copy_figures){.drop = gain,
                              .ci = {ci_gain[0], ci_gain[1]},
                              .passages = n,
                              .holds = holds,
                              .with = with};
    return 0;
}

int copy_recall(loaded_model *lm, const char *path, int quiet, copy_figures *out)
{
    bench_conv *convs = NULL;
    int n = 0, V = lm->model.cfg.vocab_size, rc = bench_convs_read(NULL, NULL, path, &convs, &n);
    if (rc)
        return rc;
    unit *units = err_calloc((size_t)n + 1, sizeof *units, "the chats");
    float *rows = err_malloc(sizeof *rows * (size_t)V, "logits");
    rc = !units || !rows ? -1 : 0;
    int used = 0, left_out = 0;
    for (int i = 0; i < n && !rc; i++) {
        const bench_conv *c = &convs[i];
        unit *u = &units[used];
        long with, without;
        rc = recall_one(lm, c, 0, rows, &u->a, &with);
        if (rc == 1) {
            rc = 0, left_out++;
            continue;
        }
        if (!rc)
            rc = recall_one(lm, c, 1, rows, &u->b, &without);
        u->n = with, used++;
        if (!rc && with != without)
            rc = err_set("--recall %s: chat %d: the fill's tokens differ without the fact", path,
                         i + 1);
        if (!quiet)
            fprintf(stderr, "\rrecall: %d of %d chats", i + 1, n);
    }
    if (!quiet)
        fputc('\n', stderr);
    if (!rc && !used)
        rc = err_set("--recall %s: no chat fits the window of %d positions", path,
                     kv_pool_opts(lm->pool)->window);
    if (!rc) {
        units[used].n = -1;
        rc = recall_report(units, used, left_out, out);
    }
    free(units);
    free(rows);
    bench_convs_free(convs, n);
    return rc;
}
