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

/* sum over blocks of dw[b] * dx[b] * (w . x over the block) */
INLINE float dot_q8(const int8_t *w, const uint16_t *dw, const int8_t *x, const float *dx, int blocks)
{
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w + DT_Q8_BLOCK * b));
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + DT_Q8_BLOCK * b));
        /* unsigned |x| times w carrying x's sign: the form the u8 x s8 instructions take (|x| <= 127) */
        __m256i ax = _mm256_sign_epi8(xv, xv), sw = _mm256_sign_epi8(wv, xv);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
        __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sw);
#elif defined(__AVXVNNI__)
        __m256i dot = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sw);
#else
        __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), _mm256_set1_epi16(1)); /* pairs <= 32258 */
#endif
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(dw[b]) * dx[b]), _mm256_cvtepi32_ps(dot), acc);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
#else
    float acc = 0;
    for (int b = 0; b < blocks; b++) {
        int32_t d = 0;
        for (int i = 0; i < DT_Q8_BLOCK; i++)
            d += (int32_t)w[DT_Q8_BLOCK * b + i] * x[DT_Q8_BLOCK * b + i];
        acc += half(dw[b]) * dx[b] * (float)d;
    }
    return acc;
#endif
}

int cpu_q8_product(kb_backend *b, float *y, const float *x, int n, int K, int N, const kb_mat *w, const float *bias)
{
    if (K % DT_Q8_BLOCK)
        return err_set("a q8 product over %d values (not a multiple of %d)", K, DT_Q8_BLOCK);
    int blocks = K / DT_Q8_BLOCK;
    /* the activations' int8 values, then their scales */
    float *scratch = cpu_scratch(b, ((size_t)n * K + 3) / 4 + (size_t)n * blocks);
    if (!scratch)
        return -1;
    int8_t *xq = (int8_t *)scratch;
    float *dx = scratch + ((size_t)n * K + 3) / 4;
#pragma omp parallel for num_threads(b->threads) if (n > 4)
    for (int t = 0; t < n; t++)
        dt_q8_quantize(xq + (size_t)t * K, NULL, dx + (size_t)t * blocks, x + (size_t)t * K, (size_t)K);
    const int8_t *q = w->data;
#pragma omp parallel for num_threads(b->threads) schedule(static)
    for (int j = 0; j < N; j++)
        for (int t = 0; t < n; t++)
            y[(size_t)t * N + j] = (bias ? bias[j] : 0.0f) + dot_q8(q + (size_t)j * K, w->scales + (size_t)j * blocks,
                                                                    xq + (size_t)t * K, dx + (size_t)t * blocks, blocks);
    return 0;
}
