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
    kb_odds odds[DRAFT_MAX_TOKENS + 1]; /* the verify pass's rows, as the rule sees them */
    float *row;  /* [V] a rejected row's logits, when a model drafter's odds make the residual */
    double *q;   /* [DRAFT_MAX_TOKENS, V] a model drafter's distributions, when sampling */
    uint32_t *w; /* the rule's integer weights of that row */
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
    s->row = err_malloc(sizeof(float) * V, "the verify pass's logits");
    s->q = draft_model(d) ? err_malloc(sizeof(double) * V * DRAFT_MAX_TOKENS, "the drafts' odds")
                          : NULL;
    s->w = err_malloc(sizeof(uint32_t) * V, "speculative sampling");
    s->scratch = err_malloc(CPU_SAMPLE_SCRATCH(V), "speculative sampling");
    if (!s->row || (draft_model(d) && !s->q) || !s->w || !s->scratch) {
        spec_free(s);
        return NULL;
    }
    return s;
}

void spec_free(spec *s)
{
    if (!s)
        return;
    free(s->row);
    free(s->q);
    free(s->w);
    free(s->scratch);
    free(s->hist);
    free(s);
}

const spec_stats *spec_get_stats(const spec *s) { return &s->st; }

/* the token drawn from max(0, p - q), normalised, at draw u, where p is the rule's on row i of the
 * verify pass (ks: its settings) and q a model drafter's distribution of the draft d */
static int residual(spec *s, int i, const kb_sample *ks, const double *q, int d, double u)
{
    int V = s->m->cfg.vocab_size;
    uint64_t total;
    if (gpt2_row_logits(s->m, i, s->row))
        return -1;
    cpu_sample_weights(s->row, V, ks, s->scratch, s->w, &total);
    const uint32_t *w = s->w;
    double sum = 0;
    for (int j = 0; j < V; j++) {
        double r = (double)w[j] / (double)total - q[j];
        sum += r > 0 ? r : 0;
    }
    if (sum <= 0) { /* p = q: no rejection is possible, but rounding may say otherwise */
        int j = cpu_sample_walk(w, V, total, u);
        return j < 0 ? d : j;
    }
    double at = u * sum, acc = 0;
    int last = d;
    for (int j = 0; j < V; j++) {
        double r = (double)w[j] / (double)total - q[j];
        if (r <= 0)
            continue;
        last = j;
        if ((acc += r) > at)
            return j;
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
    /* Each row's draws as the rule below takes them, read ahead from a copy of the stream: row
     * i's, and after a rejection the residual's, which is the one row i + 1 would have taken. */
    kb_sample ks[DRAFT_MAX_TOKENS + 2];
    double u_rest[DRAFT_MAX_TOKENS + 1];
    int drafts[DRAFT_MAX_TOKENS + 1];
    sampler ahead = *smp;
    for (int i = 0; i <= k + 1; i++)
        ks[i] = sampler_draw(&ahead, s->hist, n + i);
    for (int i = 0; i <= k; i++) {
        u_rest[i] = ks[i + 1].u;
        drafts[i] = i < k ? s->hist[n + i] : -1;
    }
    double t1 = ev_clock();
    if (gpt2_judge(s->m, s->b, cache, s->hist + n - 1, k + 1, ks, drafts, u_rest, s->odds))
        return -1;
    s->st.verify_s += ev_clock() - t1;
    s->st.draft_s += t1 - t0;
    int kept = 0, t = -1;
    for (int i = 0; t < 0; i++) {
        const kb_odds *o = &s->odds[i];
        sampler_draw(smp, s->hist, n + i); /* the stream moves as the draws are taken */
        if (i == k) {                      /* every draft kept: one more token, the model's */
            t = o->pick;
            break;
        }
        s->st.tested++;
        int d = drafts[i];
        if (greedy) {
            if (o->pick == d)
                kept++;
            else
                t = o->pick;
            continue;
        }
        double p = (double)o->weight / (double)o->total, q = with_q ? s->q[(size_t)V * i + d] : 1;
        if (ks[i].u * q < p) { /* kept with probability min(1, p / q) */
            kept++;
            continue;
        }
        sampler_draw(smp, s->hist, n + i);
        t = with_q         ? residual(s, i, &ks[i], s->q + (size_t)V * i, d, u_rest[i])
            : o->rest >= 0 ? o->rest
                           : d; /* -1: d was all p kept, never rejected */
        if (t < 0)
            return -1;
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
