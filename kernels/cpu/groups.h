/* What the 4- and 6-bit products share (q4.c, q6.c): their definition, and once their weights are
 * packed in groups of 16 outputs (the layouts in backend.h) and a block's values of the 16 are
 * unsigned bytes in vectors, the lanes' integer dot products against q8_0 activations, less the
 * values' offset times the inputs' sum, scaled and added by one fused multiply-add a block. */
#ifndef KVCHAT_CPU_GROUPS_H
#define KVCHAT_CPU_GROUPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "simd.h"

/* out[t] = output j's sum for n tokens as the 4- and 6-bit products define it: each block's
 * integer (the row's K values from `values`, packed or not), times d_w * d_x (rounded once, in
 * f32), added by one fused multiply-add, block after block */
static inline void cpu_block_ref(float *out, const kb_mat *w, int K, int j, const int8_t *xq,
                                 const float *dx, int n,
                                 void (*values)(int8_t *, const kb_mat *, int, int),
                                 float (*scale)(const kb_mat *, int, int, int))
{
    int8_t v[8192]; /* cpu_quant_product's longest reduction */
    int blocks = K / 32;
    values(v, w, j, K);
    for (int t = 0; t < n; t++) {
        float acc = 0;
        for (int b = 0; b < blocks; b++) {
            int32_t d = 0;
            for (int i = b * 32; i < (b + 1) * 32; i++)
                d += v[i] * xq[(size_t)t * K + i];
            acc = fmaf(scale(w, K, j, b) * dx[(size_t)t * blocks + b], (float)d, acc);
        }
        out[t] = acc;
    }
}

/* stored rows [c0, c1) of w as the f32 values they stand for, [K][c1 - c0] (a cpu_panel_fn's
 * work, by `values` and `scale` as cpu_block_ref) */
static inline void cpu_block_panel(float *p, const kb_mat *w, int K, int c0, int c1,
                                   void (*values)(int8_t *, const kb_mat *, int, int),
                                   float (*scale)(const kb_mat *, int, int, int))
{
    size_t nc = (size_t)(c1 - c0);
    int8_t v[8192];
    for (size_t j = 0; j < nc; j++) {
        values(v, w, (int)(c0 + j), K);
        for (int b = 0; b < K / 32; b++) {
            float d = scale(w, K, (int)(c0 + j), b);
            for (int i = b * 32; i < (b + 1) * 32; i++)
                p[(size_t)i * nc + j] = (float)v[i] * d;
        }
    }
}

/* CPU_STREAM_ROWS's loop over outputs [j0, j1) by cpu_block_ref */
#define CPU_BLOCK_REF_FOR(NT, values, scale)                    \
    for (int j = j0; j < j1; j++) {                             \
        float out[CPU_STREAM_MAX_TOKENS];                       \
        cpu_block_ref(out, w, K, j, xq, dx, NT, values, scale); \
        cpu_row_store(y, N, j, out, bias, NT);                  \
    }

#ifdef CPU_Q8_TOKENS

/* c[i] = -offset times the sum of block i's 32 inputs, over n tokens' blocks */
static inline void cpu_group_offsets(int32_t *c, const int8_t *xq, int n, int K, int offset)
{
    for (size_t i = 0; i < (size_t)n * K / 32; i++) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++)
            s += xq[i * 32 + k];
        c[i] = -offset * s;
    }
}

/* acc[t] += block b's 16 sums for NT tokens: v[r] holds values 4r..4r + 3 of each of the 16 as
 * bytes, dw their scales, c cpu_group_offsets'. A block's integers take two chains of dot
 * products (values 0-15, then 16-31), so that a one-token product waits on four of them in a row,
 * not eight. */
INLINE void cpu_group_block(__m512 *acc, const __m512i v[8], __m512 dw, const int8_t *xq,
                            const float *dx, const int32_t *c, int NT, int K, int blocks, int b)
{
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++) {
        const int8_t *x = xq + (size_t)t * K + (size_t)b * 32;
        __m512i lo = _mm512_set1_epi32(c[(size_t)t * blocks + b]), hi = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            int32_t a, e;
            memcpy(&a, x + 4 * r, 4);
            memcpy(&e, x + 16 + 4 * r, 4);
            lo = _mm512_dpbusd_epi32(lo, v[r], _mm512_set1_epi32(a));
            hi = _mm512_dpbusd_epi32(hi, v[4 + r], _mm512_set1_epi32(e));
        }
        __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(dx[(size_t)t * blocks + b]));
        acc[t] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), acc[t]);
    }
}

/* y[t][j..j + 16) = acc[t] (+ bias) for NT tokens, y's rows N apart; outputs from N on (a last
 * group of fewer: its missing rows zeros in the packed copy) are left alone */
INLINE void cpu_group_store(float *y, int N, int j, const __m512 *acc, const float *bias, int NT)
{
    __mmask16 m = N - j >= 16 ? 0xffff : (__mmask16)((1u << (N - j)) - 1);
    __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + j) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        _mm512_mask_storeu_ps(y + (size_t)t * N + j, m, _mm512_add_ps(bv, acc[t]));
}
#endif

#endif
