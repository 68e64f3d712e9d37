/* Products against 8-bit weights (DT_Q8: int8 blocks of 32 along the reduction, an f16 scale each; the
 * layout is kb_mat's). The activations are quantised per block the same way, each block's integer dot
 * product is exact (VNNI's dpbusd where the CPU has it, else pairs of 16-bit products, else plain C),
 * and the blocks' products are scaled and summed in f32. Every output is one thread's dot product in
 * a fixed order, so results do not depend on the thread count. One loop serves decode, prefill (a
 * weight row stays in L1 while every token's activations pass it) and the LM head. */
#include <math.h>
#include <stdint.h>

#include "../err.h"
#include "cpu.h"
#include "simd.h"

INLINE float half(uint16_t h)
{
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return dt_f16_to_f32(h);
#endif
}

enum { ROWS = 2, TOKENS = 4 }; /* a tile: each weight block loaded once for TOKENS tokens, each input block once for ROWS rows */

#if defined(__AVX2__) && defined(__FMA__)
/* acc[t][r] += block b's scaled integer dot product of w's row r and x's token t */
INLINE void block_q8(__m256 acc[TOKENS][ROWS], const int8_t *w, const float *dw, int nr, const int8_t *x, const float *dx,
                     int nt, int K, int blocks, int b)
{
    __m256i wv[ROWS];
    for (int r = 0; r < nr; r++)
        wv[r] = _mm256_loadu_si256((const __m256i *)(w + (size_t)r * K + DT_Q8_BLOCK * b));
    for (int t = 0; t < TOKENS; t++) {
        if (t >= nt)
            break;
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + (size_t)t * K + DT_Q8_BLOCK * b));
        /* unsigned |x| times w carrying x's sign: the form the u8 x s8 instructions take (|x| <= 127) */
        __m256i ax = _mm256_sign_epi8(xv, xv);
        for (int r = 0; r < nr; r++) {
            __m256i sw = _mm256_sign_epi8(wv[r], xv);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
            __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sw);
#elif defined(__AVXVNNI__)
            __m256i dot = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sw);
#else
            __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), _mm256_set1_epi16(1)); /* pairs <= 32258 */
#endif
            acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r * blocks + b] * dx[(size_t)t * blocks + b]),
                                        _mm256_cvtepi32_ps(dot), acc[t][r]);
        }
    }
}
#endif

/* y[t][r] = sum over blocks of dw[r][b] * dx[t][b] * (w[r] . x[t] over the block), for nr <= ROWS rows
 * of w (stride K) and nt <= TOKENS tokens of x (stride K); dw already widened to float */
INLINE void tile_q8(float y[TOKENS][ROWS], const int8_t *w, const float *dw, int nr, const int8_t *x, const float *dx,
                    int nt, int K)
{
    int blocks = K / DT_Q8_BLOCK;
#if defined(__AVX2__) && defined(__FMA__)
    /* even blocks into acc0, odd into acc1: one chain of dependent FMAs per output was the decode
     * step's limit (a column's 24 blocks back to back) */
    __m256 acc0[TOKENS][ROWS], acc1[TOKENS][ROWS];
    for (int t = 0; t < TOKENS; t++)
        for (int r = 0; r < ROWS; r++)
            acc0[t][r] = acc1[t][r] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 1 < blocks; b += 2) {
        block_q8(acc0, w, dw, nr, x, dx, nt, K, blocks, b);
        block_q8(acc1, w, dw, nr, x, dx, nt, K, blocks, b + 1);
    }
    if (b < blocks)
        block_q8(acc0, w, dw, nr, x, dx, nt, K, blocks, b);
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            __m256 a = _mm256_add_ps(acc0[t][r], acc1[t][r]);
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
            y[t][r] = _mm_cvtss_f32(s);
        }
#else
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0;
            for (int b = 0; b < blocks; b++) {
                int32_t d = 0;
                for (int i = 0; i < DT_Q8_BLOCK; i++)
                    d += (int32_t)w[(size_t)r * K + DT_Q8_BLOCK * b + i] * x[(size_t)t * K + DT_Q8_BLOCK * b + i];
                acc += dw[r * blocks + b] * dx[(size_t)t * blocks + b] * (float)d;
            }
            y[t][r] = acc;
        }
#endif
}

/* Many tokens take OpenBLAS's GEMM on the dequantised values instead: each product of a weight and an
 * activation, (q_w d_w)(q_x d_x), is the definition's term rounded once in f32, so the result stays
 * within 1e-6 of the definition while the GEMM runs at about twice the integer tiles' speed (about
 * 1000 against 540 tok/s for a 512-token prefill of the 124M shape on two Zen 4 cores). */

/* stored rows [c0, c1) of w, each K long (the reduction), as f32: [c1 - c0][K] */
static void dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    const int8_t *q = (const int8_t *)w->data + (size_t)c0 * K;
    const uint16_t *sc = w->scales + (size_t)c0 * (K / DT_Q8_BLOCK);
    for (size_t bl = 0; bl < (size_t)(c1 - c0) * (K / DT_Q8_BLOCK); bl++) {
        float d = half(sc[bl]);
        for (int i = 0; i < DT_Q8_BLOCK; i++)
            p[bl * DT_Q8_BLOCK + i] = q[bl * DT_Q8_BLOCK + i] * d;
    }
}

int cpu_q8_product(kb_backend *b, float *y, const float *x, int n, int K, int N, const kb_mat *w, const float *bias)
{
    if (K % DT_Q8_BLOCK || K > 256 * DT_Q8_BLOCK)
        return err_set("a q8 product over %d values (the kernel takes multiples of %d up to 8,192)", K, DT_Q8_BLOCK);
    int blocks = K / DT_Q8_BLOCK, gemm = n > CPU_STREAM_MAX_TOKENS;
    /* the activations' int8 values, their scales, and for a GEMM their f32 values and the panels */
    size_t iq = ((size_t)n * K + 3) / 4, nx = gemm ? (size_t)n * K : 0;
    float *scratch = cpu_scratch(b, iq + (size_t)n * blocks + nx + (gemm ? (size_t)cpu_max_threads(b) * K * CPU_PANEL : 0));
    if (!scratch)
        return -1;
    int8_t *xq = (int8_t *)scratch;
    float *dx = scratch + iq, *xf = dx + (size_t)n * blocks;
#pragma omp parallel for num_threads(b->threads) if (n > 4)
    for (int t = 0; t < n; t++) {
        dt_q8_quantize(xq + (size_t)t * K, NULL, dx + (size_t)t * blocks, x + (size_t)t * K, (size_t)K);
        for (int k = 0; k < K && gemm; k++)
            xf[(size_t)t * K + k] = xq[(size_t)t * K + k] * dx[(size_t)t * blocks + k / DT_Q8_BLOCK];
    }
    if (gemm)
        return cpu_gemm_panels(b, y, xf, n, K, N, w, bias, 1, dequantize_panel, xf + nx);
    const int8_t *q = w->data;
    /* one token (decode) streams the rows one at a time: measured faster than pairs (183 against 114
     * tok/s on the 124M shape), where for many tokens pairs are (660 against 568) */
    int per = n == 1 ? 1 : ROWS, tiles = (N + per - 1) / per;
#pragma omp parallel for num_threads(b->threads) schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        int j0 = tile * per, nr = N - j0 < per ? N - j0 : per;
        float dw[ROWS * 256], out[TOKENS][ROWS]; /* 256 blocks: reductions up to 8,192 */
        for (int r = 0; r < nr; r++)
            for (int bl = 0; bl < blocks; bl++)
                dw[r * blocks + bl] = half(w->scales[(size_t)(j0 + r) * blocks + bl]);
        for (int t0 = 0; t0 < n; t0 += TOKENS) {
            int nt = n - t0 < TOKENS ? n - t0 : TOKENS;
            const int8_t *wt = q + (size_t)j0 * K, *xt = xq + (size_t)t0 * K;
            /* the tile inlined for constant shapes, so its loops unroll into registers */
            if (n == 1)
                tile_q8(out, wt, dw, 1, xt, dx, 1, K);
            else if (nr == ROWS && nt == TOKENS)
                tile_q8(out, wt, dw, ROWS, xt, dx + (size_t)t0 * blocks, TOKENS, K);
            else
                tile_q8(out, wt, dw, nr, xt, dx + (size_t)t0 * blocks, nt, K);
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < nr; r++)
                    y[(size_t)(t0 + t) * N + j0 + r] = (bias ? bias[j0 + r] : 0.0f) + out[t][r];
        }
    }
    return 0;
}
