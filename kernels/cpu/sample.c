/* Choosing one token: the rule every backend follows, and its reference (kernels/cuda/sample.cu is
 * the twin, which finds the same thresholds by radix selection instead of sorting).
 *
 * Probabilities become integers, q = trunc(exp((l - max) / temp) * (2^32 - 256)), so that sums, the
 * top-k and top-p thresholds and the final walk are exact and give one answer on every backend:
 *   top-k keeps ids with q >= the k-th largest q (ties kept);
 *   top-p then keeps ids with q >= the largest t whose kept mass at or above t reaches top_p of the
 * total; the draw takes r = floor(u * kept total) and walks kept ids in ascending order to the
 * first whose running sum exceeds r. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../err.h"
#include "cpu.h"

#define Q_SCALE 4294967040.0f /* the largest float below 2^32 */

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int by_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

/* the k-th largest of v[0..n) (1-based k), reordering v: quickselect, O(n) on average */
static uint32_t kth_largest(uint32_t *v, int n, int k)
{
    int lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        uint32_t pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot)
                i++;
            while (v[j] < pivot)
                j--;
            if (i <= j) {
                uint32_t t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            break;
    }
    return v[want];
}

static void penalize(float *logits, int vocab, const int *history, int n_history, float penalty,
                     unsigned char *seen)
{
    if (penalty == 1.0f)
        return;
    for (int i = 0; i < n_history; i++) {
        int id = history[i];
        if (id < 0 || id >= vocab || seen[id])
            continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0 ? logits[id] / penalty : logits[id] * penalty;
    }
    for (int i = 0; i < n_history; i++)
        if (history[i] >= 0 && history[i] < vocab)
            seen[history[i]] = 0;
}

uint32_t cpu_sample_floor(const uint32_t *q, uint32_t *sel, int vocab, int top_k, float top_p)
{
    uint32_t floor_q = 0;
    int n = vocab;
    memcpy(sel, q, sizeof(uint32_t) * (size_t)vocab);
    if (top_k > 0 && top_k < vocab) {
        floor_q = kth_largest(sel, vocab, top_k);
        n = 0;
        for (int i = 0; i < vocab; i++)
            if (q[i] >= floor_q)
                sel[n++] = q[i];
    }
    if (top_p < 1.0f) {
        uint64_t total = 0, cum = 0;
        for (int i = 0; i < n; i++)
            total += sel[i];
        uint64_t need = (uint64_t)((double)top_p * (double)total);
        need = need ? need : 1;
        qsort(sel, (size_t)n, sizeof *sel, by_desc);
        for (int i = 0; i < n; i++)
            if ((cum += sel[i]) >= need) {
                floor_q = sel[i];
                break;
            }
    }
    return floor_q;
}

int cpu_sample_weights(const float *in, int vocab, const kb_sample *s, void *scratch, uint32_t *q,
                       uint64_t *total)
{
    float *logits = scratch;
    uint32_t *sel = (uint32_t *)(logits + vocab);
    memcpy(logits, in, sizeof(float) * (size_t)vocab);
    memset(sel + vocab, 0, (size_t)vocab);
    penalize(logits, vocab, s->history, s->n_history, s->repeat_penalty,
             (unsigned char *)(sel + vocab));
    int best = argmax(logits, vocab);
    *total = 0;
    if (s->temp <= 0)
        return best;
    float mx = logits[best];
    for (int i = 0; i < vocab; i++)
        q[i] = (uint32_t)(expf((logits[i] - mx) / s->temp) * Q_SCALE);
    uint32_t floor_q = cpu_sample_floor(q, sel, vocab, s->top_k, s->top_p);
    for (int i = 0; i < vocab; i++)
        if (q[i] >= floor_q)
            *total += q[i];
        else
            q[i] = 0;
    return best;
}

int cpu_sample(kb_backend *b, int *out, const float *in, int vocab, const kb_sample *s)
{
    /* scratch: the rule's (CPU_SAMPLE_SCRATCH) and q */
    float *scratch = cpu_scratch(b, CPU_SAMPLE_SCRATCH(vocab) / sizeof(float) + (size_t)vocab);
    if (!scratch)
        return -1;
    uint32_t *q = (uint32_t *)(scratch + CPU_SAMPLE_SCRATCH(vocab) / sizeof(float));
    uint64_t total;
    int best = cpu_sample_weights(in, vocab, s, scratch, q, &total);
    if (s->temp <= 0) {
        *out = best;
        return 0;
    }
    *out = cpu_sample_walk(q, vocab, total, s->u);
    return *out >= 0
               ? 0
               : err_set("sampling found no token (kept mass %llu)", (unsigned long long)total);
}

/* cpu_sample_walk over the ids other than except */
static int walk_except(const uint32_t *q, int vocab, uint64_t total, double u, int except)
{
    uint64_t r = (uint64_t)(u * (double)total), acc = 0;
    if (r >= total)
        r = total - 1;
    for (int i = 0; i < vocab; i++)
        if (q[i] && i != except && (acc += q[i]) > r)
            return i;
    return -1;
}

int cpu_sample_walk(const uint32_t *q, int vocab, uint64_t total, double u)
{
    return walk_except(q, vocab, total, u, -1);
}

int cpu_odds(kb_backend *b, kb_odds *out, const float *logits, int n, int vocab, const kb_sample *s,
             const int *ids, const double *u_rest)
{
    float *scratch = cpu_scratch(b, CPU_SAMPLE_SCRATCH(vocab) / sizeof(float) + (size_t)vocab);
    if (!scratch)
        return -1;
    uint32_t *q = (uint32_t *)(scratch + CPU_SAMPLE_SCRATCH(vocab) / sizeof(float));
    for (int i = 0; i < n; i++) {
        kb_sample row = s[0];
        row.u = s[i].u;
        row.n_history = s[0].n_history + i;
        kb_odds *o = &out[i];
        *o = (kb_odds){.rest = -1};
        o->pick =
            cpu_sample_weights(logits + (size_t)vocab * i, vocab, &row, scratch, q, &o->total);
        if (row.temp <= 0)
            continue;
        o->pick = cpu_sample_walk(q, vocab, o->total, row.u);
        int id = ids ? ids[i] : -1;
        o->weight = id >= 0 && id < vocab ? q[id] : 0;
        if (o->total > o->weight)
            o->rest = walk_except(q, vocab, o->total - o->weight, u_rest ? u_rest[i] : 0, id);
    }
    return 0;
}
