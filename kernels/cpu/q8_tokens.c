/* A few tokens (2..CPU_STREAM_MAX_TOKENS: a verify pass, a drafter's catch-up) against 8-bit
 * weights, each weight row read once for all of them and each token's output computed bit for bit
 * as a decode step computes it (q8.c's row_q8): the same lanes (block b's eight partial sums in
 * the low half of a 512-bit accumulator, block b + 1's in the high half), the same scale products
 * dw * dx, the same fused multiply-adds in the same order, the same final sums. Only the integer
 * dot products are formed another way, and an integer is exact either way.
 *
 * Decode makes |x| and negates w where x is negative (no AVX-512 sign instruction); per token and
 * per 64 weight bytes that is three operations before the dot product, which for four tokens made
 * a verify pass cost more than four decode steps. Here x is made unsigned once a pass, u = x + 128
 * (|x| <= 127), and u . w = x . w + 128 * sum(w): the correction -128 * sum(w) is made once per
 * weight row and block pair for all the tokens and starts each token's dot product (dpbusd adds to
 * it), so a token costs one dot product, one conversion, one scale product and one multiply-add. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "simd.h"
#include "vecmath.h"

#ifdef CPU_Q8_TOKENS

/* out[t] = row . token t for nt tokens: u as cpu_q8_tokens makes it, dx the tokens' block scales,
 * dw the row's f16 scales. Each pair of blocks' scale products (dw * dx, as decode rounds them) is
 * made per token and spread over its lanes by a permute: stored spread out, the tokens' scales
 * of the 3072-long reduction outgrew the first-level cache (a 4-token product 2.4x a decode
 * step's; 1.35x so). Two rows at a time, sharing the tokens' loads, measured slower: their
 * accumulators left the registers. */
INLINE void row_tokens(float *out, const int8_t *w, const uint16_t *dw, const uint8_t *u,
                       const float *dx, int nt, int K, int blocks)
{
    __m512 acc[CPU_STREAM_MAX_TOKENS];
    const __m512i c80 = _mm512_set1_epi8((char)0x80),
                  pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 1 < blocks; b += 2) {
        __m512i wv = _mm512_loadu_si512(w + DT_Q8_BLOCK * b);
        __m512i fix = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, wv));
        uint32_t d2;
        memcpy(&d2, dw + b, sizeof d2);
        __m128 dw2 = _mm_cvtph_ps(_mm_cvtsi32_si128((int)d2));
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            __m512i dot = _mm512_dpbusd_epi32(
                fix, _mm512_loadu_si512(u + (size_t)t * K + DT_Q8_BLOCK * b), wv);
            __m128 dx2 = /* unaligned where the tokens' block count is odd */
                _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(dx + (size_t)t * blocks + b)));
            __m512 sc = _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(_mm_mul_ps(dw2, dx2)));
            acc[t] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(dot), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        __m256 lo = _mm512_castps512_ps256(acc[t]),
               hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1));
        if (b < blocks) { /* an odd last block: decode's add_block_q8 into the even half */
            __m256i wv = _mm256_loadu_si256((const __m256i *)(w + DT_Q8_BLOCK * b));
            __m256i fix = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), wv));
            __m256i dot = _mm256_dpbusd_epi32(
                fix, _mm256_loadu_si256((const __m256i *)(u + (size_t)t * K + DT_Q8_BLOCK * b)),
                wv);
            float s = _cvtsh_ss(dw[b]) * dx[(size_t)t * blocks + b];
            lo = _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(dot), lo);
        }
        out[t] = vsum8(_mm256_add_ps(lo, hi));
    }
}

/* the row loop for a constant nt, so that the accumulators stay in registers */
#define ROWS_FOR(NT)                                                                              \
    for (int j = j0; j < j1; j++) {                                                               \
        float out[CPU_STREAM_MAX_TOKENS];                                                         \
        row_tokens(out, q + (size_t)j * K, w->scales + (size_t)j * blocks, u, dx, NT, K, blocks); \
        for (int t = 0; t < NT; t++)                                                              \
            y[(size_t)t * N + j] = (bias ? bias[j] : 0.0f) + out[t];                              \
    }

void cpu_q8_tokens(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                   const kb_mat *w, const float *bias, kb_act act, float *room)
{
    int blocks = K / DT_Q8_BLOCK;
    /* u: each token's values plus 128, on a whole cache line (a 512-bit load across two, after an
     * odd number of tokens' scales in the room, made 3 tokens cost more than 4) */
    uint8_t *u = (uint8_t *)(((uintptr_t)room + 63) & ~(uintptr_t)63);
    for (size_t i = 0; i < (size_t)n * K; i++)
        u[i] = (uint8_t)(xq[i] ^ 0x80);
    const int8_t *q = w->data;
    CPU_STREAM_ROWS(b, y, n, N, 1, act, ROWS_FOR)
}

#endif
