/* Matrix products against weights in f32, f16 or bf16, accumulating in f32 (bf16 weights multiply
 * inputs rounded to bf16 and prefill by their own GEMM: matmul_bf16.c).
 * Few tokens (decode): each thread reads its share of the weights once, as one ascending stream:
 * a model's weights packed in column blocks (cpu_pack) with the sums in registers, a row-major W a
 * row at a time with its partial sums in cache. Many tokens (prefill): OpenBLAS does the GEMM on
 * f32 weights (a packed W's bands put back in rows first); f16 weights are widened to f32 a panel
 * of CPU_PANEL columns at a time, in cache, just before its tiles (cpu_gemm_panels in panels.c;
 * widening the whole matrix first wrote and re-read twice its bytes, a fifth of a 128-token
 * prefill). */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "../err.h"
#include "cpu.h"
#include "simd.h"
#include "vecmath.h"

/* bf16 rows are widened split (simd.h), so acc keeps each block of 2 * VW columns below
 * bf16_cut(N) as its even columns, then its odd ones, until merge_bf16; each column takes the same
 * operations in the same order. */
INLINE size_t bf16_cut(size_t N)
{
#ifdef VW
    return N - N % (2 * VW);
#else
    (void)N;
    return 0;
#endif
}

/* acc[0..N) += x * W[row][0..N). One row at a time, so that each thread reads its band as one
 * ascending stream: the hardware prefetcher runs such a stream at the read's pace on every machine
 * measured, with no distance to tune. Four rows at a time (four streams, one row apart) needed
 * software prefetch tuned to one machine and still read at 55% of a plain read on another (README,
 * Speed). Each column takes its rows' FMAs in row order, as the four-row update did: the same
 * results bit for bit. */
INLINE void row_axpy(float *restrict acc, const void *w, dtype t, size_t row, size_t N, float x)
{
    size_t j = 0, b = row * N;
#ifdef VW
    vf xv = VSET1(x), e, o;
    if (t == DT_BF16)
        for (; j < bf16_cut(N); j += 2 * VW) {
            vld_bf16_split((const uint16_t *)w + b + j, &e, &o);
            VSTOREF(acc + j, VFMA(e, xv, VLOADF(acc + j)));
            VSTOREF(acc + j + VW, VFMA(o, xv, VLOADF(acc + j + VW)));
        }
    else
        for (; j + VW <= N; j += VW)
            VSTOREF(acc + j, VFMA(vld(w, b + j, t), xv, VLOADF(acc + j)));
#endif
    for (; j < N; j++)
        acc[j] += x * ld1(w, b + j, t);
}

/* acc's split blocks (row_axpy) back in column order */
INLINE void merge_bf16(float *acc, size_t N)
{
#ifdef VW
    for (size_t j = 0; j < bf16_cut(N); j += 2 * VW)
        vstore_merged(acc + j, VLOADF(acc + j), VLOADF(acc + j + VW));
#else
    (void)acc, (void)N;
#endif
}

/* acc[tok][0..N) = sum over rows r0..r1 of x[tok][r] * W[r][0..N), for n tokens: each row is read
 * from memory once, for every token */
INLINE void band(float *acc, const float *x, int n, const void *w, dtype t, int K, int N, int r0,
                 int r1)
{
    memset(acc, 0, sizeof(float) * (size_t)n * N);
    for (int r = r0; r < r1; r++)
        for (int tok = 0; tok < n; tok++)
            row_axpy(acc + (size_t)tok * N, w, t, (size_t)r, (size_t)N, x[(size_t)tok * K + r]);
    for (int tok = 0; t == DT_BF16 && tok < n; tok++)
        merge_bf16(acc + (size_t)tok * N, (size_t)N);
}

/* The rows are cut into bands of whole 4-row groups (the bands the sums were first defined on),
 * BANDS or the backend's most threads if more, whatever the threads of this call, and the bands'
 * partial sums are added in band order: the result does not depend on how many threads this call
 * runs (the backend changes their number between steps), and a machine with more cores uses them.
 */
enum { BANDS = 8 };

static int band_count(kb_backend *b, int K)
{
    int groups = (K + 3) / 4, most = cpu_max_threads(b) > BANDS ? cpu_max_threads(b) : BANDS;
    return groups < most ? groups : most;
}

/* band bd's rows [*r0, *r1) */
INLINE void band_rows(int K, int bands, int bd, int *r0, int *r1)
{
    int groups = (K + 3) / 4, end = groups * (bd + 1) / bands * 4;
    *r0 = groups * bd / bands * 4;
    *r1 = end < K ? end : K;
}

enum { STRIP = 64 };

/* the MLP's GELU over y[0..len), applied where a product's outputs are made */
INLINE void gelu_run(float *y, int len)
{
#pragma omp simd
    for (int j = 0; j < len; j++)
        y[j] = vm_gelu(y[j]);
}

/* what a product against weights of type t multiplies: x, or for bf16 its n values rounded to
 * bf16 in the scratch (matmul_bf16.c's definition); NULL when the scratch cannot grow */
static const float *product_input(kb_backend *b, const float *x, size_t n, dtype t)
{
    if (t != DT_BF16)
        return x;
    float *xr = cpu_scratch(b, n);
    if (xr)
        cpu_round_bf16(xr, x, n);
    return xr;
}

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
        gelu_run(y, len);
}

/* act: the GELU is applied as the bands' sums are added, by both threads, instead of by one thread
 * in a pass of its own after the product (5% of a decode step's time on its main thread) */
static int matmul_stream(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                         const float *bias, kb_act act)
{
    int K = w->rows, N = w->cols, bands = band_count(b, K);
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
            int r0, r1;
            float *acc = part + per * bd;
            band_rows(K, bands, bd, &r0, &r1);
            switch (w->type) {
                case DT_F32: band(acc, x, n, w->data, DT_F32, K, N, r0, r1); break;
                case DT_BF16: band(acc, x, n, w->data, DT_BF16, K, N, r0, r1); break;
                case DT_F16: band(acc, x, n, w->data, DT_F16, K, N, r0, r1); break;
                case DT_I8:
                case DT_Q8:
                case DT_Q4:
                case DT_Q6: break; /* int8 is a cache type; q8, q4, q6 take cpu_quant_product */
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

#ifdef VW
enum { BV = KB_COLUMN_BLOCK / VW }; /* vectors in a block's row */

/* One block of a W packed in column blocks (backend.h): y[tok][0..KB_COLUMN_BLOCK) for n tokens.
 * Each band's rows are summed in registers in row order and the bands added in order onto the
 * bias: per column the operations band() and add_bands() do on the row-major layout, so the same
 * sums bit for bit, with the block read as one ascending stream and no partial sums through
 * memory (the row-major update loads and stores its sums once per row: a core's stores, not the
 * memory, bounded it). */
INLINE void block_product(float *y, const float *x, int n, const void *blk, dtype t, int K, int N,
                          int bands, const float *bias, kb_act act)
{
    for (int tok = 0; tok < n; tok++) {
        const float *xt = x + (size_t)tok * K;
        float *yt = y + (size_t)tok * N;
        vf s[BV], p[BV], e, o;
        for (int v = 0; v < BV; v += 2)
            if (!bias)
                s[v] = s[v + 1] = VZERO();
            else if (t == DT_BF16) /* the sums of bf16 rows are split (row_axpy) */
                vld_split(bias + v * VW, &s[v], &s[v + 1]);
            else
                s[v] = VLOADF(bias + v * VW), s[v + 1] = VLOADF(bias + (v + 1) * VW);
        for (int bd = 0; bd < bands; bd++) {
            int r0, r1;
            band_rows(K, bands, bd, &r0, &r1);
            for (int v = 0; v < BV; v++)
                p[v] = VZERO();
            for (int r = r0; r < r1; r++) {
                const void *row = (const char *)blk + (size_t)r * KB_COLUMN_BLOCK * dt_elem(t);
                vf xv = VSET1(xt[r]);
                for (int v = 0; v < BV; v += 2) {
                    if (t == DT_BF16)
                        vld_bf16_split((const uint16_t *)row + v * VW, &e, &o);
                    else
                        e = vld(row, (size_t)v * VW, t), o = vld(row, (size_t)(v + 1) * VW, t);
                    p[v] = VFMA(e, xv, p[v]);
                    p[v + 1] = VFMA(o, xv, p[v + 1]);
                }
            }
            for (int v = 0; v < BV; v++)
                s[v] = VADD(s[v], p[v]);
        }
        for (int v = 0; v < BV; v += 2)
            if (t == DT_BF16)
                vstore_merged(yt + v * VW, s[v], s[v + 1]);
            else
                VSTOREF(yt + v * VW, s[v]), VSTOREF(yt + (v + 1) * VW, s[v + 1]);
        if (act == KB_GELU)
            gelu_run(yt, KB_COLUMN_BLOCK);
    }
}

/* matmul_stream's product for W packed in column blocks: each thread a contiguous run of blocks */
static int blocked_product(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                           const float *bias, kb_act act)
{
    int K = w->rows, N = w->cols, bands = band_count(b, K), blocks = N / KB_COLUMN_BLOCK;
    if (!(x = product_input(b, x, (size_t)n * K, w->type)))
        return -1;
#pragma omp parallel for num_threads(b->threads) schedule(static)
    for (int c = 0; c < blocks; c++) {
        int j0 = c * KB_COLUMN_BLOCK;
        const void *blk = cpu_w_at(w, 0, j0);
        const float *bj = bias ? bias + j0 : NULL;
        switch (w->type) {
            case DT_F32: block_product(y + j0, x, n, blk, DT_F32, K, N, bands, bj, act); break;
            case DT_BF16: block_product(y + j0, x, n, blk, DT_BF16, K, N, bands, bj, act); break;
            case DT_F16: block_product(y + j0, x, n, blk, DT_F16, K, N, bands, bj, act); break;
            case DT_I8:
            case DT_Q8:
            case DT_Q4:
            case DT_Q6: break; /* never packed */
        }
    }
    return 0;
}
#endif

int cpu_pack(kb_backend *b, kb_mat *out, const kb_mat *w)
{
    if (w->type == DT_Q4)
        return cpu_q4_pack(b, out, w);
    if (w->type == DT_Q6)
        return cpu_q6_pack(b, out, w);
    *out = (kb_mat){0};
#ifdef VW
    size_t K = (size_t)w->rows, N = (size_t)w->cols, B = KB_COLUMN_BLOCK;
    size_t es = dt_elem(w->type);
    if ((w->type != DT_F32 && w->type != DT_F16 && w->type != DT_BF16) || w->column_blocks || N % B)
        return 0;
    char *d = b->alloc(b, K * N * es, "weights in column blocks");
    if (!d)
        return -1;
    for (size_t j0 = 0; j0 < N; j0 += B)
        for (size_t k = 0; k < K; k++)
            memcpy(d + (j0 * K + k * B) * es, (const char *)w->data + (k * N + j0) * es, B * es);
    *out = *w;
    out->data = d;
    out->column_blocks = 1;
#else
    (void)b, (void)w;
#endif
    return 0;
}

/* W's columns [c0, c1) as f32 rows, [K][c1 - c0] (16-bit values widened); a run of columns at a
 * time that W holds in a row (to the panel's end, or to its column block's) */
static void widen_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    int nc = c1 - c0;
    for (int k = 0; k < K; k++)
        for (int j = 0, len; j < nc; j += len) {
            int left = KB_COLUMN_BLOCK - (c0 + j) % KB_COLUMN_BLOCK, i = 0;
            len = w->column_blocks && left < nc - j ? left : nc - j;
            const void *src = cpu_w_at(w, k, c0 + j);
            float *dst = p + (size_t)k * nc + j;
#ifdef VW
            for (; i + VW <= len; i += VW)
                VSTOREF(dst + i, vld(src, (size_t)i, w->type));
#endif
            for (; i < len; i++)
                dst[i] = ld1(src, (size_t)i, w->type);
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
    float *rows = w->column_blocks ? cpu_scratch(b, (size_t)K * N) : NULL;
    if (w->column_blocks && !rows)
        return -1;
#pragma omp parallel for num_threads(b->threads) schedule(static)
    for (int bd = 0; bd < bands; bd++) {
        int c0 = blocks * bd / bands * 16, c1 = blocks * (bd + 1) / bands * 16, ld = N;
        c1 = c1 < N ? c1 : N;
        const float *wb = (const float *)w->data + c0;
        if (rows && c1 > c0) { /* W in column blocks (decode's layout): the band back in rows of
                                * its own width, which OpenBLAS sums exactly as the file's rows
                                * (its sums depend on the band, not on the stride) */
            widen_panel(rows + (size_t)K * c0, w, K, c0, c1);
            wb = rows + (size_t)K * c0, ld = c1 - c0;
        }
        if (c1 > c0) {
            for (int i = 0; i < n && bias; i++)
                memcpy(y + (size_t)i * N + c0, bias + c0, sizeof(float) * (size_t)(c1 - c0));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c1 - c0, K, 1.0f, x, K, wb,
                        ld, bias ? 1.0f : 0.0f, y + c0, N);
        }
    }
    return 0;
}

int cpu_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
               kb_act act)
{
    if (w->type == DT_Q6 && w->column_blocks) /* cpu_q6_pack grouped its rows: matmul_t's */
        return err_set("a product of 6-bit weights packed as the token embedding's rows");
    if (w->type == DT_Q8 || w->type == DT_Q4 || w->type == DT_Q6)
        return cpu_quant_product(b, y, x, n, w->rows, w->cols, w, bias, act);
#ifdef VW
    if (w->column_blocks && n <= CPU_STREAM_MAX_TOKENS)
        return blocked_product(b, y, x, n, w, bias, act);
#endif
    if (n <= CPU_STREAM_MAX_TOKENS)
        return matmul_stream(b, y, x, n, w, bias, act);
    if (product(b, y, x, n, w, bias))
        return -1;
    return act == KB_GELU ? cpu_gelu(b, y, (size_t)n * w->cols) : 0;
}

/* y[tok][v] = x[tok] . W[v] for W's V rows of C values: VW rows at a time where C allows, read in
 * order (one ascending stream a thread) and summed together (simd.h's dot_rows) */
INLINE void dots(float *y, const float *x, int n, const void *w, dtype t, int V, int C)
{
#ifdef VW
    int G = C % VW == 0 ? VW : 1;
#else
    int G = 1;
#endif
#pragma omp for schedule(static)
    for (int g = 0; g < (V + G - 1) / G; g++)
        for (int tok = 0; tok < n; tok++) {
            int v0 = g * G, v1 = v0 + G < V ? v0 + G : V;
            float *yt = y + (size_t)tok * V;
            const float *xt = x + (size_t)tok * C;
#ifdef VW
            if (v1 - v0 == VW) {
                dot_rows(yt + v0, xt, w, t, (size_t)v0 * C, C);
                continue;
            }
#endif
            for (int v = v0; v < v1; v++)
                yt[v] = dot_t(xt, w, t, (size_t)v * C, C);
        }
}

int cpu_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w)
{
    if (w->type == DT_Q8 || w->type == DT_Q4 || w->type == DT_Q6)
        return cpu_quant_product(b, y, x, n, w->cols, w->rows, w, NULL, KB_LINEAR);
    if (!(x = product_input(b, x, (size_t)n * w->cols, w->type)))
        return -1;
#pragma omp parallel num_threads(b->threads)
    switch (w->type) {
        case DT_F32: dots(y, x, n, w->data, DT_F32, w->rows, w->cols); break;
        case DT_BF16: dots(y, x, n, w->data, DT_BF16, w->rows, w->cols); break;
        case DT_F16: dots(y, x, n, w->data, DT_F16, w->rows, w->cols); break;
        case DT_I8:
        case DT_Q8:
        case DT_Q4:
        case DT_Q6: break;
    }
    return 0;
}
