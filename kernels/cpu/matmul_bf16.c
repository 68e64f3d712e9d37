/* The product against bf16 weights. Its definition: each input row is rounded to bf16 (nearest
 * even) and the exact products are summed in f32, in every path (llama.cpp's bf16 weights and the
 * CUDA GEMM's do the same). The rounding is what lets a prefill use AVX-512 BF16's dot product, two
 * multiply-adds per f32 lane per instruction, twice an f32 FMA's work: with the inputs unrounded a
 * 128-token prefill of the 124M shape ran at about 810 tok/s through OpenBLAS on panels widened to
 * f32. Decode rounds the same way, so a cached pass and a recomputed one still agree. */
#include <omp.h>
#include <string.h>

#include "../err.h"
#include "cpu.h"
#include "simd.h"
#include "tile.h"

void cpu_round_bf16(float *dst, const float *src, size_t n)
{
    size_t i = 0;
#ifdef __AVX512BF16__
    for (; i + 16 <= n; i += 16) {
        __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        _mm512_storeu_ps(dst + i,
                         _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
#endif
    for (; i < n; i++)
        dst[i] = dt_bf16_to_f32(dt_f32_to_bf16(src[i]));
}

#ifdef __AVX512BF16__

enum { MR = 8, NR = TILE_NR }; /* a tile: 8 rows by 32 columns, 16 accumulators */

/* x's rows rounded to bf16, each padded with a zero to an even length: [n][kp] pairs */
static void pack_rows(uint32_t *dst, const float *x, int n, int K, int kp)
{
    for (int t = 0; t < n; t++) {
        uint16_t *d = (uint16_t *)(dst + (size_t)t * kp);
        const float *s = x + (size_t)t * K;
        int k = 0;
        for (; k + 16 <= K; k += 16)
            _mm256_storeu_si256((__m256i *)(d + k),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + k)));
        for (; k < K; k++)
            d[k] = dt_f32_to_bf16(s[k]);
        if (K % 2)
            d[K] = 0;
    }
}

/* Columns [c0, c0 + nc) of W [K][N] as pairs along the reduction, the layout the dot product takes:
 * [kp][ncp] 32-bit lanes of (W[2k][j], W[2k + 1][j]), zero past nc (ncp: nc rounded up to NR) and
 * past K. c0 is a multiple of CPU_PANEL, so 16 columns never cross one of W's column blocks. */
static void pack_panel(uint32_t *dst, const kb_mat *w, int K, int c0, int nc, int kp, int ncp)
{
    for (int k2 = 0; k2 < kp; k2++) {
        int odd = 2 * k2 + 1 < K;
        for (int j = 0; j < ncp; j += 16) {
            __mmask16 m = tile_lanes(nc - j);
            /* lanes past nc are masked off: their addresses are never read */
            __m512i lo =
                _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, cpu_w_at(w, 2 * k2, c0 + j)));
            __m512i hi = _mm512_cvtepu16_epi32(
                _mm256_maskz_loadu_epi16(odd ? m : 0, cpu_w_at(w, 2 * k2 + odd, c0 + j)));
            _mm512_storeu_si512(dst + (size_t)k2 * ncp + j,
                                _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* y[mr rows][NR columns, the first `valid`] = x rows . the panel's columns (+ bias); inlined with a
 * constant mr so the accumulators stay in registers */
INLINE void tile(float *y, int N, const uint32_t *xp, int kp, const uint32_t *bp, int ncp, int mr,
                 const float *bias, int valid)
{
    __m512 acc[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int k2 = 0; k2 < kp; k2++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + (size_t)k2 * ncp);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (size_t)k2 * ncp + 16);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)xp[(size_t)r * kp + k2]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
        }
    }
    tile_store(y, N, acc, mr, bias, valid);
}

int cpu_bf16_gemm(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                  const float *bias)
{
    int K = w->rows, N = w->cols, kp = (K + 1) / 2, chunks = (N + CPU_PANEL - 1) / CPU_PANEL;
    size_t rows = (size_t)n * kp, panel = (size_t)kp * CPU_PANEL;
    uint32_t *xp = (uint32_t *)cpu_scratch(b, rows + panel * (size_t)cpu_max_threads(b));
    if (!xp)
        return -1;
#pragma omp parallel num_threads(b->threads)
    {
        int per = (n + omp_get_num_threads() - 1) / omp_get_num_threads(),
            t0 = per * omp_get_thread_num();
        if (t0 < n)
            pack_rows(xp + (size_t)t0 * kp, x + (size_t)t0 * K, n - t0 < per ? n - t0 : per, K, kp);
        uint32_t *bp = xp + rows + panel * (size_t)omp_get_thread_num();
#pragma omp barrier
#pragma omp for schedule(dynamic)
        for (int c = 0; c < chunks; c++) {
            int c0 = c * CPU_PANEL, nc = N - c0 < CPU_PANEL ? N - c0 : CPU_PANEL,
                ncp = (nc + NR - 1) / NR * NR;
            pack_panel(bp, w, K, c0, nc, kp, ncp);
            for (int j = 0; j < ncp; j += NR) {
                const float *bj = bias ? bias + c0 + j : NULL;
                int m = 0;
                for (; m + MR <= n; m += MR)
                    tile(y + (size_t)m * N + c0 + j, N, xp + (size_t)m * kp, kp, bp + j, ncp, MR,
                         bj, nc - j);
                if (m < n)
                    tile(y + (size_t)m * N + c0 + j, N, xp + (size_t)m * kp, kp, bp + j, ncp, n - m,
                         bj, nc - j);
            }
        }
    }
    return 0;
}

#endif
