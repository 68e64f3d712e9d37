#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"

sampler_params sampler_defaults(void)
{
    return (sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .repeat_penalty = 1.1f, .seed = 0};
}

int sampler_init(sampler *s, const sampler_params *p, int vocab)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->vocab = vocab;
    s->rng = p->seed ^ 0x9e3779b97f4a7c15ull;
    s->prob = err_malloc(sizeof(float) * vocab, "sampler");
    s->idx = err_malloc(sizeof(int) * vocab, "sampler");
    s->seen = err_calloc((size_t)vocab, 1, "sampler");
    if (!s->prob || !s->idx || !s->seen) {
        sampler_free(s);
        return -1;
    }
    return 0;
}

void sampler_free(sampler *s)
{
    free(s->prob);
    free(s->idx);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

/* splitmix64: tiny, seedable, and the same stream on every platform */
static double next_uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int by_prob_desc(const void *a, const void *b, void *keys)
{
    const float *k = keys;
    float x = k[*(const int *)a], y = k[*(const int *)b];
    if (x != y)
        return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

int sampler_next(sampler *s, float *logits, const int *history, int n_history)
{
    const sampler_params *p = &s->p;
    int V = s->vocab;
    if (p->repeat_penalty != 1.0f) {
        for (int i = 0; i < n_history; i++) {
            int id = history[i];
            if (id < 0 || id >= V || s->seen[id])
                continue;
            s->seen[id] = 1;
            logits[id] = logits[id] > 0 ? logits[id] / p->repeat_penalty : logits[id] * p->repeat_penalty;
        }
        for (int i = 0; i < n_history; i++)
            if (history[i] >= 0 && history[i] < V)
                s->seen[history[i]] = 0;
    }
    if (p->temp <= 0)
        return argmax(logits, V);
    /* candidates: the top k (or all), sorted by logit */
    int n = 0;
    float mx = logits[argmax(logits, V)];
    for (int i = 0; i < V; i++) {
        s->prob[i] = expf((logits[i] - mx) / p->temp);
        s->idx[n++] = i;
    }
    int k = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    if (k < V || p->top_p < 1.0f) {
        if (k < V) { /* partial selection first: sorting 50k floats for every token is wasteful */
            float *pr = s->prob;
            int lo = 0, hi = V - 1;
            while (lo < hi) {
                float pivot = pr[s->idx[(lo + hi) / 2]];
                int i = lo, j = hi;
                while (i <= j) {
                    while (pr[s->idx[i]] > pivot)
                        i++;
                    while (pr[s->idx[j]] < pivot)
                        j--;
                    if (i <= j) {
                        int t = s->idx[i];
                        s->idx[i++] = s->idx[j];
                        s->idx[j--] = t;
                    }
                }
                if (k - 1 <= j)
                    hi = j;
                else if (k - 1 >= i)
                    lo = i;
                else
                    break;
            }
            n = k;
        }
        qsort_r(s->idx, (size_t)n, sizeof *s->idx, by_prob_desc, s->prob);
    }
    double total = 0;
    for (int i = 0; i < n; i++)
        total += s->prob[s->idx[i]];
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += s->prob[s->idx[i]] / total;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
        total = 0;
        for (int i = 0; i < n; i++)
            total += s->prob[s->idx[i]];
    }
    double r = next_uniform(&s->rng) * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->prob[s->idx[i]];
        if (r < acc)
            return s->idx[i];
    }
    return s->idx[n - 1];
}
