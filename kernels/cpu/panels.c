/* The prefill GEMM over weights that are not f32 as they are stored: each thread widens (or
 * dequantises) a panel of CPU_PANEL columns into its own buffer, in cache, and multiplies it at
 * once (matmul.c for 16-bit weights, q8.c for 8-bit). Its own file so both call it and neither
 * calls the other. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "cpu.h"
#include "simd.h"
#include "tile.h"

#ifdef __AVX512F__
enum { MR = 8, NR = TILE_NR };

/* y[mr rows][the first `valid` of NR columns] = x rows [.][K] . p[K][ld]'s NR columns (+ bias);
 * inlined with a constant mr so the 16 accumulators stay in registers */
INLINE void tile_f32(float *y, int N, const float *x, int K, const float *p, int ld, int mr,
                     const float *bias, int valid)
{
    __m512 acc[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 b0 = _mm512_loadu_ps(p + (size_t)k * ld),
               b1 = _mm512_loadu_ps(p + (size_t)k * ld + 16);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(x[(size_t)r * K + k]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    tile_store(y, N, acc, mr, bias, valid);
}
#endif

int cpu_gemm_panels(kb_backend *b, float *y, const float *x, int n, int K, int N, const kb_mat *w,
                    const float *bias, cpu_panel_fn panel, float *panels)
{
    int chunks = (N + CPU_PANEL - 1) / CPU_PANEL;
#pragma omp parallel num_threads(b->threads)
    {
        float *p = panels + (size_t)omp_get_thread_num() * K * CPU_PANEL;
#pragma omp for schedule(dynamic)
        for (int c = 0; c < chunks; c++) {
            int c0 = c * CPU_PANEL, nc = N - c0 < CPU_PANEL ? N - c0 : CPU_PANEL;
            panel(p, w, K, c0, c0 + nc);
#ifdef __AVX512F__
            /* a tile past the panel's last column reads up to NR - 1 floats beyond it (masked off)
             */
            for (int j = 0; j < nc; j += NR) {
                const float *bj = bias ? bias + c0 + j : NULL;
                int m = 0;
                for (; m + MR <= n; m += MR)
                    tile_f32(y + (size_t)m * N + c0 + j, N, x + (size_t)m * K, K, p + j, nc, MR, bj,
                             nc - j);
                if (m < n)
                    tile_f32(y + (size_t)m * N + c0 + j, N, x + (size_t)m * K, K, p + j, nc, n - m,
                             bj, nc - j);
            }
#else
            for (int i = 0; i < n && bias; i++)
                memcpy(y + (size_t)i * N + c0, bias + c0, sizeof(float) * (size_t)nc);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, nc, K, 1.0f, x, K, p, nc,
                        bias ? 1.0f : 0.0f, y + c0, N);
#endif
        }
    }
    return 0;
}
