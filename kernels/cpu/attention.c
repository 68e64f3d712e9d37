/* Causal self-attention reading keys and values through the cache layout of kernels/kvlayout.h
 * (paged or contiguous; f32, f16, bf16, int8 or q4 rows). Decode (few queries) walks the cached
 * rows directly, each thread a run of heads, block by block; prefill first widens each head's rows
 * into contiguous f32 and runs GEMMs, in row blocks that skip the masked upper triangle. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../err.h"
#include "../kvlayout.h"
#include "cpu.h"
#include "simd.h"
#include "vecmath.h"

#define GEMM_MIN_QUERIES 16
#define ROW_BLOCK 64

/* scale, then softmax in place over s[0..limit) */
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

static void store_row(const kb_kv *kv, int layer, int which, int head, int pos, const float *src)
{
    void *dst = kvl_row(kv, layer, which, head, pos);
    int hd = kv->head_dim;
    if (kv->type == DT_Q4) {
        dt_q4_quantize(dst, kvl_scales(kv, layer, which, head, pos), src, (size_t)hd);
        return;
    }
    if (kv->type != DT_I8) {
        dt_from_f32(dst, src, kv->type, (size_t)hd);
        return;
    }
    float mx = 0;
    for (int c = 0; c < hd; c++)
        mx = fabsf(src[c]) > mx ? fabsf(src[c]) : mx;
    float scale = mx / 127.0f, inv = mx > 0 ? 127.0f / mx : 0;
    int8_t *q = dst;
    for (int c = 0; c < hd; c++)
        q[c] = (int8_t)__builtin_rintf(src[c] * inv);
    *kvl_scale(kv, layer, which, head, pos) = scale;
}

/* the first `len` rows of one head's keys or values as f32 [len, head_dim] */
static void widen_head(float *dst, const kb_kv *kv, int layer, int which, int head, int len)
{
    int hd = kv->head_dim;
    for (int p = 0; p < len; p++) {
        float *d = dst + (size_t)p * hd;
        if (kv->type == DT_Q4) {
            dt_q4_dequantize(d, kvl_row(kv, layer, which, head, p),
                             kvl_scales(kv, layer, which, head, p), (size_t)hd);
            continue;
        }
        dt_to_f32(d, kvl_row(kv, layer, which, head, p), kv->type, (size_t)hd);
        if (kv->type == DT_I8) {
            float s = *kvl_scale(kv, layer, which, head, p);
            for (int c = 0; c < hd; c++)
                d[c] *= s;
        }
    }
}

#define INLINE static inline __attribute__((always_inline))

/* s[0..run) = the scores of q against `run` consecutive keys k of one head */
INLINE void key_run(float *s, const float *q, const void *k, const float *ks, int run, int hd,
                    dtype t)
{
    int r = 0;
#ifdef VW
    for (; hd % VW == 0 && r + VW <= run; r += VW)
        dot_rows(s + r, q, k, t, (size_t)r * hd, hd);
#endif
    for (; r < run; r++)
        s[r] = dot_t(q, k, t, (size_t)r * hd, hd);
    if (t == DT_I8)
        for (int i = 0; i < run; i++)
            s[i] *= ks[i];
}

/* o += w[r] v[r] over `run` consecutive values of one head, in row order. A head of HEAD_REG
 * (every GPT-2's) keeps o in registers across the run: through memory, each row's sums waited on
 * the last row's stores (42% of a one-thread decode attention at depth 512). The same operations
 * either way. */
enum { HEAD_REG = 64 };
INLINE void value_run(float *o, const float *w, const char *v, const float *vs, int run, int hd,
                      dtype t)
{
    size_t row = (size_t)hd * dt_size(t);
#ifdef VW
    if (hd == HEAD_REG) {
        vf acc[HEAD_REG / VW];
#pragma GCC unroll 16
        for (int i = 0; i < HEAD_REG / VW; i++)
            acc[i] = VLOADF(o + i * VW);
        for (int r = 0; r < run; r++) {
            vf a = VSET1(w[r] * (vs ? vs[r] : 1.0f));
#pragma GCC unroll 16
            for (int i = 0; i < HEAD_REG / VW; i++)
                acc[i] = VFMA(vld(v + r * row, (size_t)i * VW, t), a, acc[i]);
        }
#pragma GCC unroll 16
        for (int i = 0; i < HEAD_REG / VW; i++)
            VSTOREF(o + i * VW, acc[i]);
        return;
    }
#endif
    for (int r = 0; r < run; r++)
        axpy_t(o, w[r] * (vs ? vs[r] : 1.0f), v + r * row, t, hd);
}

/* the positions from j on that lie in j's block, up to len */
INLINE int block_run(int j, int len, int bt)
{
    return bt - j % bt < len - j ? bt - j % bt : len - j;
}

/* query_heads_t over q4 rows: each run of a block's rows widened to f32 (as many rows at a time as
 * Q4_FLOATS holds: 16 of GPT-2's heads of 64), then the f32 runs; a head's sums keep their order as
 * for the other types. cpu_attention refuses heads wider than Q4_FLOATS. */
enum { Q4_FLOATS = 4096 };
static void query_heads_q4(float *o, const float *q, const kb_kv *kv, int layer, int h0, int h1,
                           int len, float scale, float *s)
{
    int hd = kv->head_dim, bt = kv->block_tokens;
    float rows[Q4_FLOATS];
    for (int which = 0; which < 2; which++) {
        for (int j = 0, run; j < len; j += run) {
            run = block_run(j, len, bt);
            run = run < Q4_FLOATS / hd ? run : Q4_FLOATS / hd;
            for (int h = h0; h < h1; h++) {
                for (int r = 0; r < run; r++)
                    dt_q4_dequantize(rows + (size_t)r * hd, kvl_row(kv, layer, which, h, j + r),
                                     kvl_scales(kv, layer, which, h, j + r), (size_t)hd);
                float *sh = s + (size_t)(h - h0) * len + j;
                if (which == 0)
                    key_run(sh, q + (size_t)h * hd, rows, NULL, run, hd, DT_F32);
                else
                    value_run(o + (size_t)h * hd, sh, (const char *)rows, NULL, run, hd, DT_F32);
            }
        }
        for (int h = h0; h < h1 && which == 0; h++) {
            softmax_row(s + (size_t)(h - h0) * len, len, scale);
            memset(o + (size_t)h * hd, 0, sizeof(float) * hd);
        }
    }
}

/* One query against heads [h0, h1) of a layer: their scores in s, one row of len per head, and
 * their outputs in o. A paged block holds a layer's heads one after the other (kernels/kvlayout.h),
 * so each block's run is taken for all these heads before the next block: one stream through the
 * block instead of one 2 KiB run a block apart per head (16-token f16 blocks), which the hardware
 * prefetcher did not follow (decode at depths 500-700 ran 20% slower than with 256-token blocks).
 * Each head's sums keep their order, so its results do not depend on which thread takes it. */
INLINE void query_heads_t(float *o, const float *q, const kb_kv *kv, int layer, int h0, int h1,
                          int len, float scale, float *s, dtype t)
{
    int hd = kv->head_dim, bt = kv->block_tokens, i8 = t == DT_I8;
    for (int j = 0, run; j < len; j += run) {
        run = block_run(j, len, bt);
        for (int h = h0; h < h1; h++)
            key_run(s + (size_t)(h - h0) * len + j, q + (size_t)h * hd, kvl_row(kv, layer, 0, h, j),
                    i8 ? kvl_scale(kv, layer, 0, h, j) : NULL, run, hd, t);
    }
    for (int h = h0; h < h1; h++) {
        softmax_row(s + (size_t)(h - h0) * len, len, scale);
        memset(o + (size_t)h * hd, 0, sizeof(float) * hd);
    }
    for (int j = 0, run; j < len; j += run) {
        run = block_run(j, len, bt);
        for (int h = h0; h < h1; h++)
            value_run(o + (size_t)h * hd, s + (size_t)(h - h0) * len + j,
                      kvl_row(kv, layer, 1, h, j), i8 ? kvl_scale(kv, layer, 1, h, j) : NULL, run,
                      hd, t);
    }
}

static void query_heads(float *o, const float *q, const kb_kv *kv, int layer, int h0, int h1,
                        int len, float scale, float *s)
{
    switch (kv->type) {
        case DT_F32: query_heads_t(o, q, kv, layer, h0, h1, len, scale, s, DT_F32); break;
        case DT_F16: query_heads_t(o, q, kv, layer, h0, h1, len, scale, s, DT_F16); break;
        case DT_BF16: query_heads_t(o, q, kv, layer, h0, h1, len, scale, s, DT_BF16); break;
        case DT_I8: query_heads_t(o, q, kv, layer, h0, h1, len, scale, s, DT_I8); break;
        case DT_Q4: query_heads_q4(o, q, kv, layer, h0, h1, len, scale, s); break;
        case DT_Q8:
        case DT_Q6: break; /* weight types, never a cache's */
    }
}

/* rows [r0, r1) of one head: S = Q K^T over the keys they may see, softmax, O = P V */
static void query_block(float *y, const float *q, const float *k, const float *v, int past, int r0,
                        int r1, int hd, int C, float scale, float *s)
{
    int keys = past + r1, rows = r1 - r0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hd, 1.0f,
                q + (size_t)r0 * 3 * C, 3 * C, k, hd, 0.0f, s, keys);
    for (int t = 0; t < rows; t++) {
        int limit = past + r0 + t + 1;
        softmax_row(s + (size_t)t * keys, limit, scale);
        memset(s + (size_t)t * keys + limit, 0, sizeof(float) * (size_t)(keys - limit));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, keys, 1.0f, s, keys, v, hd,
                0.0f, y + (size_t)r0 * C, C);
}

/* the weights w[0..len) of one head, summed span by span into its row of the probe */
static void probe_row(const kb_probe *pr, int layer, int H, int h, const float *w, int len)
{
    float *mass = pr->mass + ((size_t)layer * H + h) * pr->n_spans;
    for (int sp = 0; sp < pr->n_spans; sp++) {
        int j0 = pr->start[sp], j1 = pr->start[sp + 1] < len ? pr->start[sp + 1] : len;
        float m = 0;
        for (int j = j0; j < j1; j++)
            m += w[j];
        mass[sp] = m;
    }
}

int cpu_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past,
                  int n, const kb_probe *probe)
{
    if (probe && n != 1)
        return err_set("an attention probe is for one-token steps, not %d tokens", n);
    if (kv->type == DT_Q4 && kv->head_dim > Q4_FLOATS)
        return err_set("a q4 cache's heads of %d values (the CPU's attention takes up to %d)",
                       kv->head_dim, Q4_FLOATS);
    int H = kv->n_head, hd = kv->head_dim, C = H * hd, T = past + n, gemm = n >= GEMM_MIN_QUERIES;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const float *src = qkv + (size_t)t * 3 * C + (size_t)h * hd;
            store_row(kv, layer, 0, h, past + t, src + C);
            store_row(kv, layer, 1, h, past + t, src + 2 * C);
        }
    size_t per_thread = (size_t)(gemm ? ROW_BLOCK : H) * T, widened = gemm ? 2 * (size_t)T * C : 0;
    float *scratch = cpu_scratch(b, widened + per_thread * b->threads);
    if (!scratch)
        return -1;
    float scale = 1.0f / sqrtf((float)hd), *wide = scratch, *scores = scratch + widened;
    if (!gemm) {
        /* each thread a run of heads: the blocks' runs of them are contiguous */
#pragma omp parallel num_threads(b->threads)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num(), h0 = H * id / nt,
                h1 = H * (id + 1) / nt;
            float *s = scores + per_thread * id;
            for (int t = 0; t < n && h0 < h1; t++) {
                query_heads(y + (size_t)t * C, qkv + (size_t)t * 3 * C, kv, layer, h0, h1,
                            past + t + 1, scale, s);
                for (int h = h0; probe && h < h1; h++)
                    probe_row(probe, layer, H, h, s + (size_t)(h - h0) * (past + 1), past + 1);
            }
        }
        return 0;
    }
#pragma omp parallel for collapse(2) num_threads(b->threads)
    for (int h = 0; h < H; h++)
        for (int which = 0; which < 2; which++)
            widen_head(wide + ((size_t)which * H + h) * T * hd, kv, layer, which, h, T);
    int blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(b->threads)
    for (int h = 0; h < H; h++)
        for (int blk = 0; blk < blocks; blk++) {
            float *s = scores + per_thread * omp_get_thread_num();
            int r1 = (blk + 1) * ROW_BLOCK < n ? (blk + 1) * ROW_BLOCK : n;
            const float *k = wide + (size_t)h * T * hd, *v = wide + ((size_t)H + h) * T * hd;
            query_block(y + (size_t)h * hd, qkv + (size_t)h * hd, k, v, past, blk * ROW_BLOCK, r1,
                        hd, C, scale, s);
        }
    return 0;
}
