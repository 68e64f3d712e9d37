/* The figures bench --policy compares two runs by, and their uncertainty: log-probabilities, KL
 * divergence and the top token of next-token distributions; percentiles; and bootstrap 95%
 * intervals over units (documents or conversations), each unit drawn whole, so that a figure's
 * interval shows how much it owes to which texts were chosen. */
#ifndef KVCHAT_BENCH_STATS_H
#define KVCHAT_BENCH_STATS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* A reference distribution p = softmax(x) that others are compared with: sum p log p, the
 * log-sum-exp of x and its most likely token */
typedef struct {
    double plogp, lse;
    int top;
} bs_ref;

/* The log-sum-exp of x[0..n) (log p of token i: x[i] minus it), and into *top (may be NULL) the
 * index of the largest x, the first of equals. Summed in fixed chunks, in order, on the threads
 * there are: any number of them gives the same bits. */
double bs_lse(const float *x, int n, int *top);
/* p[0..n) = softmax(x), and its figures into *ref */
void bs_softmax(const float *x, int n, double *p, bs_ref *ref);
/* KL(p || q), p a reference row, q = softmax(xq) of log-sum-exp lse_q; clamped at 0 (only
 * rounding makes it negative). With p kept, no exponential is taken: sum p (log p - xq) + lse_q. */
double bs_kl(const double *p, const bs_ref *ref, const float *xq, double lse_q, int n);

/* Pooled figures of units resampled with replacement: times[u] is how often unit u was drawn. */
typedef double (*bs_figure)(const void *ctx, const int *times);
/* The 2.5th and 97.5th percentiles of figure over `resamples` draws of `units` units; the draws
 * depend on seed alone, so a rerun prints the same interval. 0, or -1 out of memory. */
int bs_interval(bs_figure figure, const void *ctx, int units, int resamples, uint64_t seed,
                double out[2]);

/* Token-level values pooled from units, for percentiles under resampling: sorted once, each value
 * keeping its unit. */
typedef struct {
    float v;
    int unit;
} bs_value;
typedef struct {
    bs_value *at;
    size_t n, cap;
} bs_values;
int bs_values_add(bs_values *s, float v, int unit);
void bs_values_sort(bs_values *s);
/* The q-quantile (0..1) of the sorted values, each counted times[its unit] (NULL: once) */
double bs_quantile(const bs_values *s, const int *times, double q);
void bs_values_free(bs_values *s);

/* One unit's sums over the tokens it compared: how many, how many of them with a loss (a forced
 * end of reply has none), top-1 agreements, KL(full || rule), and both runs' losses. */
typedef struct {
    long n, n_nll, top1;
    double kl, nll, nll_full;
} bs_sums;
/* A rule's figures pooled over the units, each with its bootstrap 95% interval: the change in PPL,
 * mean KL, top-1 agreement (%) and the 95th percentile of KL (from kls, sorted here). */
enum { BS_DPPL, BS_KL, BS_TOP1, BS_P95, BS_FIGURES };
typedef struct {
    long n;
    double fig[BS_FIGURES], ci[BS_FIGURES][2];
} bs_row;
int bs_row_of(const bs_sums *units, int n_units, bs_values *kls, uint64_t seed, bs_row *row);
/* A paired comparison: figure `what` (not BS_P95) of a minus b's, over the same units, each draw
 * taking a unit from both (so that what the units share cancels), with its 95% interval; b NULL:
 * a's figure alone */
int bs_paired(const bs_sums *a, const bs_sums *b, int n_units, int what, uint64_t seed,
              double *diff, double ci[2]);
/* v as JSON, which has no NaN: a figure of no tokens is null */
json_t *bs_json_number(double v);
/* a paired difference as a table's cell, "+0.0123 [+0.0045, +0.0201]" (scaled; digits after the
 * point) */
void bs_diff_cell(char *out, size_t size, double diff, const double ci[2], double scale,
                  int digits);
/* a paired difference as JSON: {"diff": d, "diff_95": [low, high]} (null where no token) */
json_t *bs_paired_json(double diff, const double ci[2]);
/* the row's figures under a header's columns (bs_row_head), without the line's end */
void bs_row_head(const char *first);
void bs_row_print(const char *name, const bs_row *row);
/* the row as JSON: tokens, and each figure with its interval as [low, high] */
json_t *bs_row_json(const bs_row *row);

#endif
