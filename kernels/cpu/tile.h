/* The register tiles of the CPU's own GEMMs (f16 panels in panels.c, matmul_bf16.c, q8.c): a few
 * rows of accumulators two vectors (32 columns) wide, stored with the panel's last columns masked
 * off. */
#ifndef KVCHAT_TILE_H
#define KVCHAT_TILE_H

#include "simd.h"

#ifdef __AVX512F__
enum { TILE_NR = 32 };

/* the first `valid` of 16 lanes (none when valid <= 0) */
INLINE __mmask16 tile_lanes(int valid)
{
    return valid >= 16 ? 0xffff : valid > 0 ? (__mmask16)((1u << valid) - 1) : 0;
}

/* y's rows [mr] (stride N), their first `valid` of 32 columns = acc + bias (NULL: none) */
INLINE void tile_store(float *y, int N, __m512 (*acc)[2], int mr, const float *bias, int valid)
{
    __mmask16 m0 = tile_lanes(valid), m1 = tile_lanes(valid - 16);
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_ps(y + (size_t)r * N, m0, _mm512_add_ps(acc[r][0], b0));
        _mm512_mask_storeu_ps(y + (size_t)r * N + 16, m1, _mm512_add_ps(acc[r][1], b1));
    }
}

#endif

#endif
