/* Matrix products against weights in f32, f16 or bf16, accumulating in f32.
 * Few tokens (decode): each thread streams its own contiguous band of weight rows once and keeps
 * partial sums in cache, so the product runs at memory bandwidth. Many tokens (prefill): the weights
 * are widened to f32 when needed and OpenBLAS does the GEMM. */
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "../err.h"
#include "cpu.h"

/* Up to this many tokens, re-reading a cached band of weight rows beats widening them for a GEMM. */
#define STREAM_MAX_TOKENS 8

#define INLINE static inline __attribute__((always_inline))

INLINE float ld1(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return ((const float *)p)[i];
    if (t == DT_BF16)
        return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    return dt_f16_to_f32(((const uint16_t *)p)[i]);
}

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
INLINE vf vld(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return _mm512_loadu_ps((const float *)p + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    if (t == DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
#define VLOADF(p) _mm512_loadu_ps(p)
#define VSTOREF(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VZERO() _mm512_setzero_ps()
#define VSUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VW 8
typedef __m256 vf;
INLINE vf vld(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (t == DT_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
INLINE float vsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#define VLOADF(p) _mm256_loadu_ps(p)
#define VSTOREF(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VZERO() _mm256_setzero_ps()
#define VSUM(v) vsum8(v)
#endif

/* acc[0..N) += sum over r<4 of x[r] * W[row + r][0..N) */
INLINE void rows4_axpy(float *restrict acc, const void *w, dtype t, size_t row, size_t N, const float *x)
{
    size_t j = 0, b0 = row * N, b1 = b0 + N, b2 = b1 + N, b3 = b2 + N;
#ifdef VW
    vf x0 = VSET1(x[0]), x1 = VSET1(x[1]), x2 = VSET1(x[2]), x3 = VSET1(x[3]);
    for (; j + VW <= N; j += VW) {
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

INLINE void row_axpy(float *restrict acc, const void *w, dtype t, size_t row, size_t N, float x)
{
    for (size_t j = 0; j < N; j++)
        acc[j] += x * ld1(w, row * N + j, t);
}

/* acc[tok][0..N) = sum over rows r0..r1 of x[tok][r] * W[r][0..N), for n tokens. */
INLINE void band(float *acc, const float *x, int n, const void *w, dtype t, int K, int N, int r0, int r1)
{
    memset(acc, 0, sizeof(float) * (size_t)n * N);
    int r = r0;
    for (; r + 4 <= r1; r += 4)
        for (int tok = 0; tok < n; tok++)
            rows4_axpy(acc + (size_t)tok * N, w, t, (size_t)r, (size_t)N, x + (size_t)tok * K + r);
    for (; r < r1; r++)
        for (int tok = 0; tok < n; tok++)
            row_axpy(acc + (size_t)tok * N, w, t, (size_t)r, (size_t)N, x[(size_t)tok * K + r]);
}

static int matmul_stream(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias)
{
    int K = w->rows, N = w->cols, nt = b->threads;
    size_t per = (size_t)n * N;
    float *part = cpu_scratch(b, per * nt);
    if (!part)
        return -1;
#pragma omp parallel num_threads(nt)
    {
        int th = omp_get_thread_num(), cnt = omp_get_num_threads();
        /* bands of whole 4-row groups, so every thread streams contiguous memory */
        int groups = (K + 3) / 4, g0 = groups * th / cnt, g1 = groups * (th + 1) / cnt;
        int r0 = g0 * 4, r1 = g1 * 4 < K ? g1 * 4 : K;
        float *acc = part + per * th;
        switch (w->type) {
        case DT_F32: band(acc, x, n, w->data, DT_F32, K, N, r0, r1); break;
        case DT_BF16: band(acc, x, n, w->data, DT_BF16, K, N, r0, r1); break;
        case DT_F16: band(acc, x, n, w->data, DT_F16, K, N, r0, r1); break;
        }
        for (int c = cnt; c < nt && th == 0; c++) /* threads the runtime did not give us */
            memset(part + per * c, 0, per * sizeof(float));
#pragma omp barrier
#pragma omp for schedule(static)
        for (size_t i = 0; i < per; i++) {
            float s = bias ? bias[i % N] : 0.0f;
            for (int c = 0; c < nt; c++)
                s += part[per * c + i];
            y[i] = s;
        }
    }
    return 0;
}

int cpu_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias)
{
    int K = w->rows, N = w->cols;
    if (n <= STREAM_MAX_TOKENS)
        return matmul_stream(b, y, x, n, w, bias);
    const float *wf = w->data;
    if (w->type != DT_F32) {
        float *tmp = cpu_scratch(b, (size_t)K * N);
        if (!tmp)
            return -1;
        dt_to_f32(tmp, w->data, w->type, (size_t)K * N);
        wf = tmp;
    }
    /* each thread runs a single-threaded GEMM on its own band of output columns: one threading
     * runtime (OpenMP) instead of two competing for the cores */
#pragma omp parallel num_threads(b->threads)
    {
        int th = omp_get_thread_num(), cnt = omp_get_num_threads(), blocks = (N + 15) / 16;
        int c0 = blocks * th / cnt * 16, c1 = blocks * (th + 1) / cnt * 16;
        c1 = c1 < N ? c1 : N;
        if (c1 > c0) {
            for (int i = 0; i < n && bias; i++)
                memcpy(y + (size_t)i * N + c0, bias + c0, sizeof(float) * (size_t)(c1 - c0));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c1 - c0, K, 1.0f, x, K, wf + c0, N,
                        bias ? 1.0f : 0.0f, y + c0, N);
        }
    }
    return 0;
}

INLINE float dot(const float *x, const void *w, dtype t, size_t off, int C)
{
    int c = 0;
    float s = 0;
#ifdef VW
    vf a0 = VZERO(), a1 = VZERO();
    for (; c + 2 * VW <= C; c += 2 * VW) {
        a0 = VFMA(VLOADF(x + c), vld(w, off + c, t), a0);
        a1 = VFMA(VLOADF(x + c + VW), vld(w, off + c + VW, t), a1);
    }
    s = VSUM(a0) + VSUM(a1);
#endif
    for (; c < C; c++)
        s += x[c] * ld1(w, off + c, t);
    return s;
}

INLINE void dots(float *y, const float *x, int n, const void *w, dtype t, int V, int C)
{
#pragma omp for schedule(static)
    for (int v = 0; v < V; v++)
        for (int tok = 0; tok < n; tok++)
            y[(size_t)tok * V + v] = dot(x + (size_t)tok * C, w, t, (size_t)v * C, C);
}

int cpu_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w)
{
#pragma omp parallel num_threads(b->threads)
    switch (w->type) {
    case DT_F32: dots(y, x, n, w->data, DT_F32, w->rows, w->cols); break;
    case DT_BF16: dots(y, x, n, w->data, DT_BF16, w->rows, w->cols); break;
    case DT_F16: dots(y, x, n, w->data, DT_F16, w->rows, w->cols); break;
    }
    return 0;
}
