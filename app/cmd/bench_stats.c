#include "bench_stats.h"

#include <math.h>
#include <stdlib.h>

#include "../../kernels/err.h"

int bs_log_softmax(const float *x, int n, double *out)
{
    int top = 0;
    for (int i = 1; i < n; i++)
        top = x[i] > x[top] ? i : top;
    double mx = x[top], s = 0;
    for (int i = 0; i < n; i++)
        s += exp(x[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < n; i++)
        out[i] = x[i] - lse;
    return top;
}

double bs_kl(const double *lp, const double *lq, int n)
{
    double kl = 0;
    for (int i = 0; i < n; i++)
        kl += exp(lp[i]) * (lp[i] - lq[i]);
    return kl > 0 ? kl : 0;
}

/* splitmix64: the draws need only be uniform and the same on every machine */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bs_interval(bs_figure figure, const void *ctx, int units, int resamples, uint64_t seed,
                double out[2])
{
    int *times = err_malloc(sizeof *times * (size_t)(units ? units : 1), "a resample");
    double *fig = err_malloc(sizeof *fig * (size_t)(resamples ? resamples : 1), "the resamples");
    if (!times || !fig) {
        free(times);
        free(fig);
        return -1;
    }
    for (int r = 0; r < resamples; r++) {
        for (int u = 0; u < units; u++)
            times[u] = 0;
        for (int k = 0; k < units; k++)
            times[next_u64(&seed) % (uint64_t)units]++;
        fig[r] = figure(ctx, times);
    }
    qsort(fig, (size_t)resamples, sizeof *fig, cmp_double);
    out[0] = resamples ? fig[(int)(0.025 * (resamples - 1))] : NAN;
    out[1] = resamples ? fig[(int)ceil(0.975 * (resamples - 1))] : NAN;
    free(times);
    free(fig);
    return 0;
}

int bs_values_add(bs_values *s, float v, int unit)
{
    if (err_grow(&s->at, &s->cap, s->n + 1, sizeof *s->at, "the token figures"))
        return -1;
    s->at[s->n++] = (bs_value){v, unit};
    return 0;
}

static int cmp_value(const void *a, const void *b)
{
    float x = ((const bs_value *)a)->v, y = ((const bs_value *)b)->v;
    return (x > y) - (x < y);
}

void bs_values_sort(bs_values *s)
{
    if (s->n)
        qsort(s->at, s->n, sizeof *s->at, cmp_value);
}

double bs_quantile(const bs_values *s, const int *times, double q)
{
    double total = 0, seen = 0;
    for (size_t i = 0; i < s->n; i++)
        total += times ? times[s->at[i].unit] : 1;
    if (total <= 0)
        return NAN;
    /* the smallest value with at least q of the weight at or below it */
    for (size_t i = 0; i < s->n; i++) {
        seen += times ? times[s->at[i].unit] : 1;
        if (seen >= q * total && (!times || times[s->at[i].unit]))
            return s->at[i].v;
    }
    return s->at[s->n - 1].v;
}

void bs_values_free(bs_values *s)
{
    free(s->at);
    s->at = NULL;
    s->n = s->cap = 0;
}
