/* One speculative round: draft, verify in one pass, keep what the rule keeps (speculate.h). */
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/cpu.h"
#include "../kernels/err.h"
#include "speculate.h"

struct spec {
    gpt2_model *m;
    kb_backend *b;
    drafter *d;
    spec_stats st;
    float *logits; /* [DRAFT_MAX_TOKENS + 1, V] the verify pass's, host memory */
    double *q;     /* [DRAFT_MAX_TOKENS, V] a model drafter's distributions, when sampling */
    uint32_t *w;   /* the rule's integer weights of one position */
    void *scratch;
    int *hist; /* the context and the round's drafts */
    size_t cap_hist;
    int made[DRAFT_MAX_TOKENS + 1], n_made, taken; /* spec_next's: the last round's tokens */
};

spec *spec_new(gpt2_model *m, kb_backend *b, drafter *d)
{
    spec *s = err_calloc(1, sizeof *s, "speculative decoding");
    if (!s)
        return NULL;
    size_t V = (size_t)m->cfg.vocab_size;
    s->m = m;
    s->b = b;
    s->d = d;
    s->logits = err_malloc(sizeof(float) * V * (DRAFT_MAX_TOKENS + 1), "the verify pass's logits");
    s->q = draft_model(d) ? err_malloc(sizeof(double) * V * DRAFT_MAX_TOKENS, "the drafts' odds")
                          : NULL;
    s->w = err_malloc(sizeof(uint32_t) * V, "speculative sampling");
    s->scratch = err_malloc(CPU_SAMPLE_SCRATCH(V), "speculative sampling");
    if (!s->logits || (draft_model(d) && !s->q) || !s->w || !s->scratch) {
        spec_free(s);
        return NULL;
    }
    return s;
}

void spec_free(spec *s)
{
    if (!s)
        return;
    free(s->logits);
    free(s->q);
    free(s->w);
    free(s->scratch);
    free(s->hist);
    free(s);
}

const spec_stats *spec_get_stats(const spec *s) { return &s->st; }

/* the rule's draw from the weights (never -1: total > 0 whenever the rule samples) */
static int walk(const uint32_t *w, int V, uint64_t total, double u)
{
    int i = cpu_sample_walk(w, V, total, u);
    return i < 0 ? V - 1 : i;
}

/* the token drawn from max(0, p - q), normalised, at draw u; q: a distribution, or NULL for the
 * certain token d (prompt lookup) */
static int residual(const uint32_t *w, uint64_t total, const double *q, int d, int V, double u)
{
    double sum = 0;
    for (int i = 0; i < V; i++) {
        double r = (double)w[i] / (double)total - (q ? q[i] : i == d);
        sum += r > 0 ? r : 0;
    }
    if (sum <= 0) /* p = q: no rejection is possible, but rounding may say otherwise */
        return walk(w, V, total, u);
    double at = u * sum, acc = 0;
    int last = d;
    for (int i = 0; i < V; i++) {
        double r = (double)w[i] / (double)total - (q ? q[i] : i == d);
        if (r <= 0)
            continue;
        last = i;
        if ((acc += r) > at)
            return i;
    }
    return last;
}

int spec_round(spec *s, kv_seq *cache, const int *ids, int n, sampler *smp, int max_out, int *out,
               int *n_out, int *rejected)
{
    int V = s->m->cfg.vocab_size, k = 0, greedy = smp->p.temp <= 0, with_q = !greedy && s->q;
    if (max_out > DRAFT_MAX_TOKENS + 1)
        max_out = DRAFT_MAX_TOKENS + 1;
    if (err_grow(&s->hist, &s->cap_hist, (size_t)n + DRAFT_MAX_TOKENS + 1, sizeof *s->hist,
                 "the speculative context"))
        return -1;
    memcpy(s->hist, ids, sizeof *ids * (size_t)n);
    double t0 = ev_clock();
    if (max_out > 1 &&
        draft_propose(s->d, ids, n, smp, max_out - 1, s->hist + n, &k, with_q ? s->q : NULL))
        return err_wrap("drafting");
    double t1 = ev_clock();
    if (gpt2_verify(s->m, s->b, cache, s->hist + n - 1, k + 1, s->logits))
        return -1;
    s->st.verify_s += ev_clock() - t1;
    s->st.draft_s += t1 - t0;
    int kept = 0, t = -1;
    for (int i = 0; t < 0; i++) {
        const float *row = s->logits + (size_t)V * (size_t)i;
        kb_sample ks = sampler_draw(smp, s->hist, n + i);
        uint64_t total;
        int best = cpu_sample_weights(row, V, &ks, s->scratch, s->w, &total), d = s->hist[n + i];
        if (i == k) { /* every draft kept: one more token, the model's */
            t = greedy ? best : walk(s->w, V, total, ks.u);
            break;
        }
        s->st.tested++;
        if (greedy) {
            if (best == d)
                kept++;
            else
                t = best;
            continue;
        }
        double p = (double)s->w[d] / (double)total, q = with_q ? s->q[(size_t)V * i + d] : 1;
        if (ks.u * q < p) { /* kept with probability min(1, p / q) */
            kept++;
            continue;
        }
        t = residual(s->w, total, with_q ? s->q + (size_t)V * i : NULL, d, V,
                     sampler_draw(smp, s->hist, n + i).u);
    }
    memcpy(out, s->hist + n, sizeof *out * (size_t)kept);
    out[kept] = t;
    *n_out = kept + 1;
    *rejected = k - kept;
    s->st.rounds++;
    s->st.drafted += k;
    s->st.accepted += kept;
    s->st.made += kept + 1;
    return draft_settle(s->d, s->hist, n + kept);
}

int spec_next(spec *s, kv_seq *cache, const int *ids, int n, sampler *smp, int max_out, int *next,
              int *rejected)
{
    int r = 0;
    if (s->taken == s->n_made) {
        s->taken = s->n_made = 0;
        if (spec_round(s, cache, ids, n, smp, max_out, s->made, &s->n_made, &r) ||
            (!rejected && kv_rewind(cache, kv_len(cache) - r, 0)))
            return -1;
    }
    if (rejected)
        *rejected = r;
    *next = s->made[s->taken++];
    return 0;
}

int spec_queued(const spec *s) { return s->n_made - s->taken; }

void spec_drop(spec *s) { s->taken = s->n_made = 0; }

void spec_use(spec *s, drafter *d)
{
    spec_drop(s);
    s->d = d;
}
