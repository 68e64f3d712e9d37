#include "bench_stats.h"

#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/err.h"

/* A row's chunks: fixed, whatever the threads, so that sums keep their order. A chunk of the
 * vocabulary's 50257 is about 3,000 values: each thread's share outweighs starting the threads. */
enum { CHUNKS = 16 };

static int chunk_at(int n, int c) { return (int)((long long)n * c / CHUNKS); }

double bs_lse(const float *x, int n, int *top)
{
    int best[CHUNKS], t = 0;
    double part[CHUNKS], s = 0, mx = 0;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int c = 0; c < CHUNKS; c++) {
            int b = chunk_at(n, c);
            for (int i = b + 1; i < chunk_at(n, c + 1); i++)
                b = x[i] > x[b] ? i : b;
            best[c] = b;
        }
#pragma omp single
        {
            t = best[0];
            for (int c = 1; c < CHUNKS; c++)
                t = x[best[c]] > x[t] ? best[c] : t;
            mx = x[t];
        }
#pragma omp for schedule(static)
        for (int c = 0; c < CHUNKS; c++) {
            double sum = 0;
            for (int i = chunk_at(n, c); i < chunk_at(n, c + 1); i++)
                sum += exp(x[i] - mx);
            part[c] = sum;
        }
    }
    for (int c = 0; c < CHUNKS; c++)
        s += part[c];
    if (top)
        *top = t;
    return mx + log(s);
}

void bs_softmax(const float *x, int n, double *p, bs_ref *ref)
{
    double lse = bs_lse(x, n, &ref->top), part[CHUNKS], s = 0;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < CHUNKS; c++) {
        double sum = 0;
        for (int i = chunk_at(n, c); i < chunk_at(n, c + 1); i++) {
            double lp = x[i] - lse;
            p[i] = exp(lp);
            sum += p[i] * lp;
        }
        part[c] = sum;
    }
    for (int c = 0; c < CHUNKS; c++)
        s += part[c];
    ref->lse = lse;
    ref->plogp = s;
}

double bs_kl(const double *p, const bs_ref *ref, const float *xq, double lse_q, int n)
{
    double part[CHUNKS], dot = 0;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < CHUNKS; c++) {
        double sum = 0;
        for (int i = chunk_at(n, c); i < chunk_at(n, c + 1); i++)
            sum += p[i] * xq[i];
        part[c] = sum;
    }
    for (int c = 0; c < CHUNKS; c++)
        dot += part[c];
    double kl = ref->plogp - dot + lse_q;
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

enum { RESAMPLES = 1000 };

typedef struct {
    const bs_sums *units;
    int n_units, what;
    const bs_values *kls;
} pooled;

static double pooled_figure(const void *ctx, const int *times)
{
    const pooled *p = ctx;
    double n = 0, n_nll = 0, nll = 0, nll_full = 0, kl = 0, top1 = 0;
    for (int u = 0; u < p->n_units; u++) {
        const bs_sums *s = &p->units[u];
        double w = times ? times[u] : 1;
        n += w * s->n, n_nll += w * s->n_nll, nll += w * s->nll, nll_full += w * s->nll_full;
        kl += w * s->kl, top1 += w * s->top1;
    }
    switch (p->what) {
        case BS_DPPL: return n_nll > 0 ? exp(nll / n_nll) - exp(nll_full / n_nll) : NAN;
        case BS_KL: return n > 0 ? kl / n : NAN;
        case BS_TOP1: return n > 0 ? 100 * top1 / n : NAN;
        default: return bs_quantile(p->kls, times, 0.95);
    }
}

int bs_row_of(const bs_sums *units, int n_units, bs_values *kls, uint64_t seed, bs_row *row)
{
    bs_values_sort(kls);
    row->n = 0;
    for (int u = 0; u < n_units; u++)
        row->n += units[u].n;
    for (int w = 0; w < BS_FIGURES; w++) {
        pooled p = {units, n_units, w, kls};
        row->fig[w] = pooled_figure(&p, NULL);
        if (bs_interval(pooled_figure, &p, n_units, RESAMPLES, seed, row->ci[w]))
            return -1;
    }
    return 0;
}

typedef struct {
    pooled a, b;
} paired;

static double paired_figure(const void *ctx, const int *times)
{
    const paired *p = ctx;
    return pooled_figure(&p->a, times) - (p->b.units ? pooled_figure(&p->b, times) : 0);
}

int bs_paired(const bs_sums *a, const bs_sums *b, int n_units, int what, uint64_t seed,
              double *diff, double ci[2])
{
    paired p = {{a, n_units, what, NULL}, {b, n_units, what, NULL}};
    *diff = paired_figure(&p, NULL);
    return bs_interval(paired_figure, &p, n_units, RESAMPLES, seed, ci);
}

void bs_row_head(const char *first)
{
    printf("%-13s %7s  %-28s %-25s %8s  %-19s", first, "tokens", "dPPL [95%]", "KL mean [95%]",
           "KL p95", "top-1 [95%]");
}

void bs_row_print(const char *name, const bs_row *r)
{
    char c1[64], c2[64], c3[64];
    snprintf(c1, sizeof c1, "%+.3f [%+.3f, %+.3f]", r->fig[BS_DPPL], r->ci[BS_DPPL][0],
             r->ci[BS_DPPL][1]);
    snprintf(c2, sizeof c2, "%.4f [%.4f, %.4f]", r->fig[BS_KL], r->ci[BS_KL][0], r->ci[BS_KL][1]);
    snprintf(c3, sizeof c3, "%.1f%% [%.1f, %.1f]", r->fig[BS_TOP1], r->ci[BS_TOP1][0],
             r->ci[BS_TOP1][1]);
    printf("%-13s %7ld  %-28s %-25s %8.4f  %-19s", name, r->n, c1, c2, r->fig[BS_P95], c3);
}

json_t *bs_json_number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *num(double v, double scale) { return bs_json_number(v * scale); }

json_t *bs_row_json(const bs_row *r)
{
    static const char *const key[BS_FIGURES] = {"delta_ppl", "kl_mean", "top1", "kl_p95"};
    json_t *o = json_object();
    json_object_set_new(o, "tokens", json_integer(r->n));
    for (int w = 0; w < BS_FIGURES; w++) {
        double scale = w == BS_TOP1 ? 0.01 : 1;
        char ci[32];
        snprintf(ci, sizeof ci, "%s_ci", key[w]);
        json_object_set_new(o, key[w], num(r->fig[w], scale));
        json_object_set_new(o, ci,
                            json_pack("[o, o]", num(r->ci[w][0], scale), num(r->ci[w][1], scale)));
    }
    return o;
}

void bs_diff_cell(char *out, size_t size, double diff, const double ci[2], double scale, int digits)
{
    snprintf(out, size, "%+.*f [%+.*f, %+.*f]", digits, scale * diff, digits, scale * ci[0], digits,
             scale * ci[1]);
}

json_t *bs_paired_json(double diff, const double ci[2])
{
    return json_pack("{s:o, s:[o, o]}", "diff", num(diff, 1), "diff_95", num(ci[0], 1),
                     num(ci[1], 1));
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
