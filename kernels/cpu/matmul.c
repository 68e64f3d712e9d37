/* Matrix products against weights in f32, f16 or bf16, accumulating in f32 (bf16 weights multiply
 * inputs rounded to bf16 and prefill by their own GEMM: matmul_bf16.c).
 * Few tokens (decode): each thread streams its own contiguous band of weight rows once and keeps
 * partial sums in cache, so the product runs at memory bandwidth. Many tokens (prefill): OpenBLAS
 * does the GEMM on f32 weights; f16 weights are widened to f32 a panel of CPU_PANEL columns at a
 * time, in cache, just before its tiles (cpu_gemm_panels in panels.c; widening the whole matrix
 * first wrote and re-read twice its bytes, a fifth of a 128-token prefill). */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "../err.h"
#include "cpu.h"
#include "simd.h"
#include "vecmath.h"

/* acc[0..N) += sum over r<4 of x[r] * W[row + r][0..N). The hardware prefetcher follows one stream
 * but not four rows that start afresh every group, so the next group's rows are asked for, a cache
 * line each, while this group's are summed (`ahead`: there is a next group): with two threads a
 * band of bf16 rows ran at 30 GB/s of the machine's 46, and at 51 with this. bf16 rows are widened
 * split (simd.h), so acc keeps each block of 2 * VW columns below bf16_cut(N) as its even columns,
 * then its odd ones, until merge_bf16; each column takes the same operations in the same order. */
INLINE size_t bf16_cut(size_t N)
{
#ifdef VW
    return N - N % (2 * VW);
#else
    (void)N;
    return 0;
#endif
}

/* rows4_axpy's bf16 columns [0, bf16_cut(N)), 2 * VW at a time */
INLINE void rows4_axpy_bf16(float *restrict acc, const uint16_t *w, size_t b0, size_t N,
                            const float *x, int ahead)
{
#ifdef VW
    size_t b1 = b0 + N, b2 = b1 + N, b3 = b2 + N, cut = bf16_cut(N);
    const char *next = (const char *)(w + b3 + N);
    vf x0 = VSET1(x[0]), x1 = VSET1(x[1]), x2 = VSET1(x[2]), x3 = VSET1(x[3]), e, o;
    for (size_t j = 0; j < cut; j += 2 * VW) {
        if (ahead && j % 32 == 0)
            for (size_t r = 0; r < 4; r++)
                _mm_prefetch(next + (r * N + j) * 2, _MM_HINT_T0);
        vf ae = VLOADF(acc + j), ao = VLOADF(acc + j + VW);
        vld_bf16_split(w + b0 + j, &e, &o);
        ae = VFMA(e, x0, ae), ao = VFMA(o, x0, ao);
        vld_bf16_split(w + b1 + j, &e, &o);
        ae = VFMA(e, x1, ae), ao = VFMA(o, x1, ao);
        vld_bf16_split(w + b2 + j, &e, &o);
        ae = VFMA(e, x2, ae), ao = VFMA(o, x2, ao);
        vld_bf16_split(w + b3 + j, &e, &o);
        ae = VFMA(e, x3, ae), ao = VFMA(o, x3, ao);
        VSTOREF(acc + j, ae);
        VSTOREF(acc + j + VW, ao);
    }
#else
    (void)acc, (void)w, (void)b0, (void)N, (void)x, (void)ahead;
#endif
}

INLINE void rows4_axpy(float *restrict acc, const void *w, dtype t, size_t row, size_t N,
                       const float *x, int ahead)
{
    size_t j = 0, b0 = row * N, b1 = b0 + N, b2 = b1 + N, b3 = b2 + N;
    if (t == DT_BF16) {
        rows4_axpy_bf16(acc, w, b0, N, x, ahead);
        j = bf16_cut(N);
    }
#ifdef VW
    size_t es = dt_elem(t), line = 64 / es;
    const char *next = (const char *)w + (b3 + N) * es;
    vf x0 = VSET1(x[0]), x1 = VSET1(x[1]), x2 = VSET1(x[2]), x3 = VSET1(x[3]);
    for (; t != DT_BF16 && j + VW <= N; j += VW) {
        if (ahead && j % line == 0)
            for (size_t r = 0; r < 4; r++)
                _mm_prefetch(next + (r * N + j) * es, _MM_HINT_T0);
        vf a = VLOADF(acc + j);
        a = VFMA(vld(w, b0 + j, t), x0, a);
        a = VFMA(vld(w, b1 + j, t), x1, a);
        a = VFMA(vld(w, b2 + j, t), x2, a);
        a = VFMA(vld(w, b3 + j, t), x3, a);
        VSTOREF(acc + j, a);
    }
#endif
    for (; j < N; j++)
        acc[j] += x[0] * ld1(w, b0 + j, t) + x[1] * ld1(w, b1 + j, t) + x[2] * ld1(w, b2 + j, t) +
                  x[3] * ld1(w, b3 + j, t);
}

/* acc's split blocks (rows4_axpy) back in column order */
INLINE void merge_bf16(float *acc, size_t N)
{
#ifdef VW
    for (size_t j = 0; j < bf16_cut(N); j += 2 * VW)
        vstore_merged(acc + j, VLOADF(acc + j), VLOADF(acc + j + VW));
#else
    (void)acc, (void)N;
#endif
}

INLINE void row_axpy(float *restrict acc, const void *w, dtype t, size_t row, size_t N, float x)
{
    for (size_t j = 0; j < N; j++)
        acc[j] += x * ld1(w, row * N + j, t);
}

/* acc[tok][0..N) = sum over rows r0..r1 of x[tok][r] * W[r][0..N), for n tokens. */
INLINE void band(float *acc, const float *x, int n, const void *w, dtype t, int K, int N, int r0,
                 int r1)
{
    memset(acc, 0, sizeof(float) * (size_t)n * N);
    int r = r0;
    for (; r + 4 <= r1; r += 4)
        for (int tok = 0; tok < n; tok++)
            rows4_axpy(acc + (size_t)tok * N, w, t, (size_t)r, (size_t)N, x + (size_t)tok * K + r,
                       r + 8 <= K);
    for (int tok = 0; t == DT_BF16 && tok < n; tok++)
        merge_bf16(acc + (size_t)tok * N, (size_t)N);
    for (; r < r1; r++)
        for (int tok = 0; tok < n; tok++)
            row_axpy(acc + (size_t)tok * N, w, t, (size_t)r, (size_t)N, x[(size_t)tok * K + r]);
}

/* The rows are cut into bands of whole 4-row groups, BANDS or the backend's most threads if more,
 * whatever the threads of this call, each thread streaming a contiguous run of bands, and the
 * bands' partial sums are added in band order: the result does not depend on how many threads this
 * call runs (the backend changes their number between steps), and a machine with more cores uses
 * them. */
enum { BANDS = 8 };

enum { STRIP = 64 };

/* y[0..len) = bias + the bands' partial sums (part[bd * per + j]), added in band order (so the sum
 * does not depend on who adds it), a strip of columns at a time so each addition is a vector one:
 * one sum per column through all the bands was a chain of dependent scalar additions, 5% of a
 * decode step */
INLINE void add_bands(float *restrict y, const float *part, size_t per, int bands,
                      const float *bias, int len, kb_act act)
{
#pragma omp simd
    for (int j = 0; j < len; j++)
        y[j] = bias ? bias[j] : 0.0f;
    for (int bd = 0; bd < bands; bd++) {
        const float *p = part + per * (size_t)bd;
#pragma omp simd
        for (int j = 0; j < len; j++)
            y[j] += p[j];
    }
    if (act == KB_GELU)
#pragma omp simd
        for (int j = 0; j < len; j++)
            y[j] = vm_gelu(y[j]);
}

/* act: the GELU is applied as the bands' sums are added, by both threads, instead of by one thread
 * in a pass of its own after the product (5% of a decode step's time on its main thread) */
static int matmul_stream(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                         const float *bias, kb_act act)
{
    int K = w->rows, N = w->cols, groups = (K + 3) / 4,
        most = cpu_max_threads(b) > BANDS ? cpu_max_threads(b) : BANDS;
    int bands = groups < most ? groups : most;
    size_t per = (size_t)n * N;
    float *part = cpu_scratch(b, per * bands + (w->type == DT_BF16 ? (size_t)n * K : 0));
    if (!part)
        return -1;
    if (w->type == DT_BF16) { /* matmul_bf16.c's definition */
        cpu_round_bf16(part + per * bands, x, (size_t)n * K);
        x = part + per * bands;
    }
#pragma omp parallel num_threads(b->threads)
    {
#pragma omp for schedule(static)
        for (int bd = 0; bd < bands; bd++) {
            int r0 = groups * bd / bands * 4, r1 = groups * (bd + 1) / bands * 4;
            float *acc = part + per * bd;
            r1 = r1 < K ? r1 : K;
            switch (w->type) {
                case DT_F32: band(acc, x, n, w->data, DT_F32, K, N, r0, r1); break;
                case DT_BF16: band(acc, x, n, w->data, DT_BF16, K, N, r0, r1); break;
                case DT_F16: band(acc, x, n, w->data, DT_F16, K, N, r0, r1); break;
                case DT_I8:
                case DT_Q8: break; /* int8 is a cache type; q8 weights take cpu_q8_product */
            }
        }
        int strips = (N + STRIP - 1) / STRIP;
#pragma omp for schedule(static)
        for (int i = 0; i < n * strips; i++) {
            int tok = i / strips, j0 = i % strips * STRIP, len = N - j0 < STRIP ? N - j0 : STRIP;
            add_bands(y + (size_t)tok * N + j0, part + (size_t)tok * N + j0, per, bands,
                      bias ? bias + j0 : NULL, len, act);
        }
    }
    return 0;
}

/* A 16-bit W's columns [c0, c1) widened to f32, [K][c1 - c0] */
static void widen_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    size_t nc = (size_t)(c1 - c0);
    for (size_t k = 0; k < (size_t)K; k++) {
        float *dst = p + k * nc;
        size_t at = k * (size_t)w->cols + (size_t)c0, j = 0;
#ifdef VW
        for (; j + VW <= nc; j += VW)
            VSTOREF(dst + j, vld(w->data, at + j, w->type));
#endif
        for (; j < nc; j++)
            dst[j] = ld1(w->data, at + j, w->type);
    }
}

/* the GEMMs of a prefill */
static int product(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                   const float *bias)
{
    int K = w->rows, N = w->cols;
#ifdef CPU_BF16_GEMM
    if (w->type == DT_BF16)
        return cpu_bf16_gemm(b, y, x, n, w, bias);
#endif
    if (w->type != DT_F32) {
        size_t nx = w->type == DT_BF16 ? (size_t)n * K : 0;
        float *panels = cpu_scratch(b, nx + (size_t)cpu_max_threads(b) * K * CPU_PANEL + CPU_PANEL);
        if (!panels)
            return -1;
        if (nx) {
            cpu_round_bf16(panels, x, nx);
            x = panels;
        }
        return cpu_gemm_panels(b, y, x, n, K, N, w, bias, widen_panel, panels + nx);
    }
    /* single-threaded GEMMs on bands of output columns, one band per core the backend may use: one
     * threading runtime (OpenMP) instead of two competing for the cores. A column's sum depends on
     * its band's width, so the bands follow the backend's most threads, not this call's: a step run
     * with fewer threads gives the same result. */
    int blocks = (N + 15) / 16, most = cpu_max_threads(b), bands = blocks < most ? blocks : most;
#pragma omp parallel for num_threads(b->threads) schedule(static)
    for (int bd = 0; bd < bands; bd++) {
        int c0 = blocks * bd / bands * 16, c1 = blocks * (bd + 1) / bands * 16;
        c1 = c1 < N ? c1 : N;
        if (c1 > c0) {
            for (int i = 0; i < n && bias; i++)
                memcpy(y + (size_t)i * N + c0, bias + c0, sizeof(float) * (size_t)(c1 - c0));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c1 - c0, K, 1.0f, x, K,
                        (const float *)w->data + c0, N, bias ? 1.0f : 0.0f, y + c0, N);
        }
    }
    return 0;
}

int cpu_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
               kb_act act)
{
    if (w->type != DT_Q8 && n <= CPU_STREAM_MAX_TOKENS)
        return matmul_stream(b, y, x, n, w, bias, act);
    if (w->type == DT_Q8)
        return cpu_q8_product(b, y, x, n, w->rows, w->cols, w, bias, act);
    if (product(b, y, x, n, w, bias))
        return -1;
    return act == KB_GELU ? cpu_gelu(b, y, (size_t)n * w->cols) : 0;
}

INLINE void dots(float *y, const float *x, int n, const void *w, dtype t, int V, int C)
{
#pragma omp for schedule(static)
    for (int v = 0; v < V; v++)
        for (int tok = 0; tok < n; tok++)
            y[(size_t)tok * V + v] = dot_t(x + (size_t)tok * C, w, t, (size_t)v * C, C);
}

int cpu_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w)
{
    if (w->type == DT_Q8)
        return cpu_q8_product(b, y, x, n, w->cols, w->rows, w, NULL, KB_LINEAR);
    if (w->type == DT_BF16) {
        float *xr = cpu_scratch(b, (size_t)n * w->cols);
        if (!xr)
            return -1;
        cpu_round_bf16(xr, x, (size_t)n * w->cols);
        x = xr;
    }
#pragma omp parallel num_threads(b->threads)
    switch (w->type) {
        case DT_F32: dots(y, x, n, w->data, DT_F32, w->rows, w->cols); break;
        case DT_BF16: dots(y, x, n, w->data, DT_BF16, w->rows, w->cols); break;
        case DT_F16: dots(y, x, n, w->data, DT_F16, w->rows, w->cols); break;
        case DT_I8:
        case DT_Q8: break;
    }
    return 0;
}
