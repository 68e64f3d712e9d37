/* Causal self-attention over a head-major KV cache ([n_head, capacity, head_dim] per layer, so each
 * head's keys are one contiguous run). Decode (few queries) loops over keys; prefill computes scores
 * and outputs per head with GEMMs, in row blocks that skip the masked upper triangle. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu.h"
#include "vecmath.h"

#define GEMM_MIN_QUERIES 16
#define ROW_BLOCK 64

/* scale, causal mask at column `limit`, softmax in place over s[0..limit) */
static void softmax_row(float *s, int limit, float scale)
{
    float mx = -INFINITY, sum = 0;
    for (int j = 0; j < limit; j++)
        mx = s[j] * scale > mx ? s[j] * scale : mx;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < limit; j++) {
        s[j] = vm_expf(s[j] * scale - mx);
        sum += s[j];
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < limit; j++)
        s[j] *= inv;
}

static void one_query(float *o, const float *q, const float *k, const float *v, int len, int hd, float scale, float *s)
{
    for (int j = 0; j < len; j++) {
        float d = 0;
#pragma omp simd reduction(+ : d)
        for (int c = 0; c < hd; c++)
            d += q[c] * k[(size_t)j * hd + c];
        s[j] = d;
    }
    softmax_row(s, len, scale);
    memset(o, 0, sizeof(float) * hd);
    for (int j = 0; j < len; j++) {
        float p = s[j];
#pragma omp simd
        for (int c = 0; c < hd; c++)
            o[c] += p * v[(size_t)j * hd + c];
    }
}

/* rows [r0, r1) of one head: S = Q K^T over the keys they may see, softmax, O = P V */
static void query_block(float *y, const float *qkv, const float *k, const float *v, int past, int r0, int r1, int hd,
                        int C, float scale, float *s)
{
    int keys = past + r1, rows = r1 - r0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, 1.0f, qkv + (size_t)r0 * 3 * C, 3 * C, k, hd,
                0.0f, s, keys);
    for (int t = 0; t < rows; t++) {
        int limit = past + r0 + t + 1;
        softmax_row(s + (size_t)t * keys, limit, scale);
        memset(s + (size_t)t * keys + limit, 0, sizeof(float) * (size_t)(keys - limit));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, 1.0f, s, keys, v, hd, 0.0f,
                y + (size_t)r0 * C, C);
}

int cpu_attention(kb_backend *b, float *y, const float *qkv, float *kc, float *vc, int cap, int past, int n, int n_head,
                  int C)
{
    int hd = C / n_head, T = past + n, gemm = n >= GEMM_MIN_QUERIES;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_head; h++) {
            size_t dst = ((size_t)h * cap + past + t) * hd, src = (size_t)t * 3 * C + (size_t)h * hd;
            memcpy(kc + dst, qkv + src + C, sizeof(float) * hd);
            memcpy(vc + dst, qkv + src + 2 * C, sizeof(float) * hd);
        }
    size_t per_thread = gemm ? (size_t)ROW_BLOCK * T : (size_t)T;
    float *scores = cpu_scratch(b, per_thread * b->threads);
    if (!scores)
        return -1;
    float scale = 1.0f / sqrtf((float)hd);
    int blocks = gemm ? (n + ROW_BLOCK - 1) / ROW_BLOCK : n;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(b->threads)
    for (int h = 0; h < n_head; h++)
        for (int blk = 0; blk < blocks; blk++) {
            float *s = scores + per_thread * omp_get_thread_num();
            const float *k = kc + (size_t)h * cap * hd, *v = vc + (size_t)h * cap * hd;
            if (gemm) {
                int r1 = (blk + 1) * ROW_BLOCK < n ? (blk + 1) * ROW_BLOCK : n;
                query_block(y + (size_t)h * hd, qkv + (size_t)h * hd, k, v, past, blk * ROW_BLOCK, r1, hd, C, scale, s);
            } else {
                one_query(y + (size_t)blk * C + (size_t)h * hd, qkv + (size_t)blk * 3 * C + (size_t)h * hd, k, v,
                          past + blk + 1, hd, scale, s);
            }
        }
    return 0;
}
