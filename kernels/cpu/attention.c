/* Causal self-attention reading keys and values through the cache layout of kernels/kvlayout.h
 * (paged or contiguous; f32, f16, bf16 or int8 rows). Decode (few queries) walks the cached rows
 * directly; prefill first widens each head's rows into contiguous f32 and runs GEMMs, in row blocks
 * that skip the masked upper triangle. */
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
        dt_to_f32(d, kvl_row(kv, layer, which, head, p), kv->type, (size_t)hd);
        if (kv->type == DT_I8) {
            float s = *kvl_scale(kv, layer, which, head, p);
            for (int c = 0; c < hd; c++)
                d[c] *= s;
        }
    }
}

#define INLINE static inline __attribute__((always_inline))

#ifdef __AVX512F__
/* s[r] = dot_t(q, k, t, off + r * hd, hd) for 16 rows (hd a multiple of 16) with dot_t's
 * operations, the lanes of the 16 rows' accumulators summed together (simd.h's vsum16_x16): one
 * reduction a row was most of a decode step's attention at a depth of 512 */
INLINE void dots16(float *s, const float *q, const void *k, dtype t, size_t off, int hd)
{
    __m512 a0[16], a1[16];
    for (int r = 0; r < 16; r++)
        dot_parts(q, k, t, off + (size_t)r * hd, hd, &a0[r], &a1[r]);
    _mm512_storeu_ps(s, _mm512_add_ps(vsum16_x16(a0), vsum16_x16(a1)));
}
#endif

/* Rows of one head are contiguous within a block: walk them run by run, not position by position.
 */
INLINE void one_query_t(float *o, const float *q, const kb_kv *kv, int layer, int head, int len,
                        float scale, float *s, dtype t)
{
    int hd = kv->head_dim, bt = kv->block_tokens;
    for (int j = 0; j < len;) {
        int run = bt - j % bt < len - j ? bt - j % bt : len - j;
        const void *k = kvl_row(kv, layer, 0, head, j);
        int r = 0;
#ifdef __AVX512F__
        for (; hd % 16 == 0 && r + 16 <= run; r += 16)
            dots16(s + j + r, q, k, t, (size_t)r * hd, hd);
#endif
        for (; r < run; r++)
            s[j + r] = dot_t(q, k, t, (size_t)r * hd, hd);
        if (t == DT_I8) {
            const float *ks = kvl_scale(kv, layer, 0, head, j);
            for (int i = 0; i < run; i++)
                s[j + i] *= ks[i];
        }
        j += run;
    }
    softmax_row(s, len, scale);
    memset(o, 0, sizeof(float) * hd);
    for (int j = 0; j < len;) {
        int run = bt - j % bt < len - j ? bt - j % bt : len - j;
        const char *v = kvl_row(kv, layer, 1, head, j);
        const float *vs = t == DT_I8 ? kvl_scale(kv, layer, 1, head, j) : NULL;
        for (int r = 0; r < run; r++)
            axpy_t(o, s[j + r] * (vs ? vs[r] : 1.0f), v + (size_t)r * hd * dt_size(t), t, hd);
        j += run;
    }
}

static void one_query(float *o, const float *q, const kb_kv *kv, int layer, int head, int len,
                      float scale, float *s)
{
    switch (kv->type) {
        case DT_F32: one_query_t(o, q, kv, layer, head, len, scale, s, DT_F32); break;
        case DT_F16: one_query_t(o, q, kv, layer, head, len, scale, s, DT_F16); break;
        case DT_BF16: one_query_t(o, q, kv, layer, head, len, scale, s, DT_BF16); break;
        case DT_I8: one_query_t(o, q, kv, layer, head, len, scale, s, DT_I8); break;
        case DT_Q8: break; /* a weight type, never a cache's */
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
    int H = kv->n_head, hd = kv->head_dim, C = H * hd, T = past + n, gemm = n >= GEMM_MIN_QUERIES;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const float *src = qkv + (size_t)t * 3 * C + (size_t)h * hd;
            store_row(kv, layer, 0, h, past + t, src + C);
            store_row(kv, layer, 1, h, past + t, src + 2 * C);
        }
    size_t per_thread = gemm ? (size_t)ROW_BLOCK * T : (size_t)T,
           widened = gemm ? 2 * (size_t)T * C : 0;
    float *scratch = cpu_scratch(b, widened + per_thread * b->threads);
    if (!scratch)
        return -1;
    float scale = 1.0f / sqrtf((float)hd), *wide = scratch, *scores = scratch + widened;
    if (gemm) {
#pragma omp parallel for collapse(2) num_threads(b->threads)
        for (int h = 0; h < H; h++)
            for (int which = 0; which < 2; which++)
                widen_head(wide + ((size_t)which * H + h) * T * hd, kv, layer, which, h, T);
    }
    int blocks = gemm ? (n + ROW_BLOCK - 1) / ROW_BLOCK : n;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(b->threads)
    for (int h = 0; h < H; h++)
        for (int blk = 0; blk < blocks; blk++) {
            float *s = scores + per_thread * omp_get_thread_num();
            if (gemm) {
                int r1 = (blk + 1) * ROW_BLOCK < n ? (blk + 1) * ROW_BLOCK : n;
                const float *k = wide + (size_t)h * T * hd, *v = wide + ((size_t)H + h) * T * hd;
                query_block(y + (size_t)h * hd, qkv + (size_t)h * hd, k, v, past, blk * ROW_BLOCK,
                            r1, hd, C, scale, s);
            } else {
                one_query(y + (size_t)blk * C + (size_t)h * hd,
                          qkv + (size_t)blk * 3 * C + (size_t)h * hd, kv, layer, h, past + blk + 1,
                          scale, s);
                if (probe)
                    probe_row(probe, layer, H, h, s, past + 1);
            }
        }
    return 0;
}
