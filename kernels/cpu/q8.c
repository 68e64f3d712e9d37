/* Products against 8-bit weights (DT_Q8: int8 blocks of 32 along the reduction, an f16 scale each;
 * the layout is kb_mat's). The activations are quantised per block the same way, each block's
 * integer dot product is exact (VNNI's dpbusd where the CPU has it, else pairs of 16-bit products,
 * else plain C), and the blocks' products are scaled and summed in f32. Every output is one
 * thread's dot product in a fixed order, so results do not depend on the thread count. Up to
 * CPU_STREAM_MAX_TOKENS tokens (decode, the LM head) one loop streams the weight rows (2 or more
 * tokens with AVX-512 VNNI: q8_tokens.c, each token's sums decode's); more tokens take a GEMM. */
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "../err.h"
#include "cpu.h"
#include "simd.h"
#include "tile.h"
#include "vecmath.h"

enum {
    ROWS = 2,
    TOKENS = 4
}; /* a tile: each weight block loaded once for TOKENS tokens, each input block once for ROWS rows
    */

#if defined(__AVX2__) && defined(__FMA__)
/* a block's integer dot product as 8 lanes, from |x| and w carrying x's sign: the form the
 * u8 x s8 instructions take (|x| <= 127) */
INLINE __m256i dot_q8(__m256i ax, __m256i sw)
{
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sw);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sw);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), _mm256_set1_epi16(1)); /* <= 32258 */
#endif
}

/* acc[t][r] += block b's scaled integer dot product of w's row r and x's token t */
INLINE void block_q8(__m256 acc[TOKENS][ROWS], const int8_t *w, const float *dw, int nr,
                     const int8_t *x, const float *dx, int nt, int K, int blocks, int b)
{
    __m256i wv[ROWS];
    for (int r = 0; r < nr; r++)
        wv[r] = _mm256_loadu_si256((const __m256i *)(w + (size_t)r * K + DT_Q8_BLOCK * b));
    for (int t = 0; t < TOKENS; t++) {
        if (t >= nt)
            break;
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + (size_t)t * K + DT_Q8_BLOCK * b));
        __m256i ax = _mm256_sign_epi8(xv, xv);
        for (int r = 0; r < nr; r++) {
            __m256i dot = dot_q8(ax, _mm256_sign_epi8(wv[r], xv));
            acc[t][r] =
                _mm256_fmadd_ps(_mm256_set1_ps(dw[r * blocks + b] * dx[(size_t)t * blocks + b]),
                                _mm256_cvtepi32_ps(dot), acc[t][r]);
        }
    }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* block b's dot_q8 of a row w and x, with |x| (ax) made once for all the rows */
INLINE __m256i row_block_q8(const int8_t *w, const int8_t *x, const int8_t *ax, int b)
{
    const __m256i *at = (const __m256i *)(ax + DT_Q8_BLOCK * b);
    return dot_q8(_mm256_loadu_si256(at),
                  _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(w + DT_Q8_BLOCK * b)),
                                   _mm256_loadu_si256((const __m256i *)(x + DT_Q8_BLOCK * b))));
}

/* acc += block b's scaled dot_q8 of a row w and x (s: the row's scale products) */
INLINE __m256 add_block_q8(__m256 acc, const int8_t *w, const int8_t *x, const int8_t *ax,
                           const float *s, int b)
{
    return _mm256_fmadd_ps(_mm256_set1_ps(s[b]), _mm256_cvtepi32_ps(row_block_q8(w, x, ax, b)),
                           acc);
}

/* One token against one stored row (decode): tile_q8's operations for one row and one token, with
 * |x| (ax) and each block's scale product (s[b] = dw[b] * dx[b]) made once, so the same sums bit
 * for bit with fewer instructions a block: decode was bound by them, not by the memory. Returns
 * its 8 lanes for vsum8 (even blocks in one accumulator, odd in another, as tile_q8). */
INLINE __m256 row_q8(const int8_t *w, const int8_t *x, const int8_t *ax, const uint64_t *neg,
                     const float *s, int blocks)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int b = 0;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    /* two blocks an instruction, block b in the low 256 bits and b + 1 in the high: the same lanes
     * and sums as below (the accumulator is acc0 | acc1), in half the instructions. AVX-512 has
     * no sign instruction: w is negated where x is negative (neg: x's sign bits, made once). */
    __m512 acc = _mm512_setzero_ps();
    const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (; b + 1 < blocks; b += 2) {
        __m512i wv = _mm512_loadu_si512(w + DT_Q8_BLOCK * b);
        wv = _mm512_mask_sub_epi8(wv, _cvtu64_mask64(neg[b / 2]), _mm512_setzero_si512(), wv);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                          _mm512_loadu_si512(ax + DT_Q8_BLOCK * b), wv);
        __m512 sc = _mm512_permutexvar_ps(
            pair, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(s + b)))));
        acc = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(dot), acc);
    }
    acc0 = _mm512_castps512_ps256(acc);
    acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
#else
    (void)neg;
    for (; b + 1 < blocks; b += 2) {
        acc0 = add_block_q8(acc0, w, x, ax, s, b);
        acc1 = add_block_q8(acc1, w, x, ax, s, b + 1);
    }
#endif
    if (b < blocks)
        acc0 = add_block_q8(acc0, w, x, ax, s, b);
    return _mm256_add_ps(acc0, acc1);
}

/* s[b] = dw[b] * dx[b] for a row's f16 scales dw */
INLINE void scale_products(float *s, const uint16_t *dw, const float *dx, int blocks)
{
    int b = 0;
    for (; b + 8 <= blocks; b += 8)
        _mm256_storeu_ps(s + b,
                         _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw + b))),
                                       _mm256_loadu_ps(dx + b)));
    for (; b < blocks; b++)
        s[b] = simd_half(dw[b]) * dx[b];
}

enum { GROUP = 4 }; /* decode's rows whose sums are finished together (vsum8x4) */

/* decode's product: rows in ascending order, one at a time (one stream: two rows' blocks in turn,
 * two streams a row apart, read the memory at a third of the pace), |x| made once; each thread's
 * run of rows, their lanes summed four rows at a time, then its GELU in vectors (a row at a time,
 * the sums and the GELU were a fifth of the product's time) */
static void decode_q8(float *y, const int8_t *xq, int8_t *ax, uint64_t *neg, const float *dx, int K,
                      int N, const kb_mat *w, const float *bias, kb_act act, int threads)
{
    int blocks = K / DT_Q8_BLOCK;
    const int8_t *q = w->data;
    for (int i = 0; i < K; i += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(xq + i));
        _mm256_storeu_si256((__m256i *)(ax + i), _mm256_abs_epi8(v));
        if (i % 64 == 0)
            neg[i / 64] = (uint32_t)_mm256_movemask_epi8(v);
        else
            neg[i / 64] |= (uint64_t)(uint32_t)_mm256_movemask_epi8(v) << 32;
    }
#pragma omp parallel num_threads(threads)
    {
        int id = omp_get_thread_num(), nt = omp_get_num_threads();
        int j0 = (int)((long)N * id / nt), j1 = (int)((long)N * (id + 1) / nt), j = j0;
        float s[GROUP][256]; /* reductions up to 8,192 */
        for (; j + GROUP <= j1; j += GROUP) {
            __m256 acc[GROUP];
            for (int r = 0; r < GROUP; r++)
                scale_products(s[r], w->scales + (size_t)(j + r) * blocks, dx, blocks);
            for (int r = 0; r < GROUP; r++)
                acc[r] = row_q8(q + (size_t)(j + r) * K, xq, ax, neg, s[r], blocks);
            __m128 v = vsum8x4(acc);
            _mm_storeu_ps(y + j, bias ? _mm_add_ps(_mm_loadu_ps(bias + j), v) : v);
        }
        for (; j < j1; j++) {
            scale_products(s[0], w->scales + (size_t)j * blocks, dx, blocks);
            y[j] = (bias ? bias[j] : 0.0f) +
                   vsum8(row_q8(q + (size_t)j * K, xq, ax, neg, s[0], blocks));
        }
        if (act == KB_GELU)
            vm_gelu_columns(y, 1, N, j0, j1);
    }
}
#endif

/* y[t][r] = sum over blocks of dw[r][b] * dx[t][b] * (w[r] . x[t] over the block), for nr <= ROWS
 * rows of w (stride K) and nt <= TOKENS tokens of x (stride K); dw already widened to float */
INLINE void tile_q8(float y[TOKENS][ROWS], const int8_t *w, const float *dw, int nr,
                    const int8_t *x, const float *dx, int nt, int K)
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
        for (int r = 0; r < nr; r++)
            y[t][r] = vsum8(_mm256_add_ps(acc0[t][r], acc1[t][r]));
#else
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0;
            for (int b = 0; b < blocks; b++) {
                int32_t d = 0;
                for (int i = 0; i < DT_Q8_BLOCK; i++)
                    d += (int32_t)w[(size_t)r * K + DT_Q8_BLOCK * b + i] *
                         x[(size_t)t * K + DT_Q8_BLOCK * b + i];
                acc += dw[r * blocks + b] * dx[(size_t)t * blocks + b] * (float)d;
            }
            y[t][r] = acc;
        }
#endif
}

#ifdef __AVX512BF16__
/* Many tokens: the same integer dot products by AVX-512 BF16's dot product, as a GEMM. An int8 is
 * exact in bf16, and a block's 32 products of two and their sum (at most 32 * 127^2) are exact in
 * f32, so each block's dot is the definition's integer; it is then scaled and summed as decode
 * does. Two multiply-adds per lane per instruction where the f32 GEMM on dequantised values did
 * one: a 128-token prefill of the 124M shape ran at about 900 tok/s that way. */
enum {
    MR = 4,
    NR = TILE_NR,
    PAIRS = DT_Q8_BLOCK / 2
}; /* a tile: 4 rows by 32 columns, 8 + 8 accumulators */

/* the bf16 of each lane's bytes (b0, b1) as one pair, and of (b2, b3) */
INLINE __m512i pair(__m512i v, int hi)
{
    __m512i a = _mm512_srai_epi32(_mm512_slli_epi32(v, hi ? 8 : 24), 24);
    __m512i b = _mm512_srai_epi32(_mm512_slli_epi32(v, hi ? 0 : 16), 24);
    __m512i fa = _mm512_castps_si512(_mm512_cvtepi32_ps(a)),
            fb = _mm512_castps_si512(_mm512_cvtepi32_ps(b));
    return _mm512_or_si512(_mm512_srli_epi32(fa, 16),
                           _mm512_and_si512(fb, _mm512_set1_epi32((int)0xffff0000u)));
}

/* values k..k+3 of a q4 group's 16 columns (backend.h's layout), as int8: their block's run,
 * its low nibbles for the block's first 16 values, its high ones for the rest, less 8 */
INLINE __m512i q4_run(const uint8_t *group, int k)
{
    int r = k % DT_Q4_BLOCK;
    __m512i v = _mm512_loadu_si512(group + ((size_t)k / DT_Q4_BLOCK * 4 + r % 16 / 4) * 64);
    v = _mm512_and_si512(r < 16 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(15));
    return _mm512_sub_epi8(v, _mm512_set1_epi8(8));
}

/* stored rows [c0, c0 + nc) of w as bf16 pairs along the reduction, [K / 2][ncp] (zero past nc),
 * and their scales, [blocks][ncp]; 4-bit rows are first unpacked to int8 in `room` (nc * K bytes)
 */
static void pack_panel(uint32_t *bp, float *dwp, const kb_mat *w, int K, int c0, int nc, int ncp,
                       int8_t *room)
{
    int blocks = K / DT_Q8_BLOCK, grouped = w->type == DT_Q4 && w->column_blocks;
    const int8_t *q = (const int8_t *)w->data + (size_t)c0 * K;
    if ((w->type == DT_Q4 && !grouped) || w->type == DT_Q6) {
        for (int j = 0; j < nc; j++)
            (w->type == DT_Q4 ? cpu_q4_values : cpu_q6_values)(room + (size_t)j * K, w, c0 + j, K);
        q = room;
    }
    for (int j = 0; j < ncp; j += 16) {
        __mmask16 m = tile_lanes(nc - j);
        __m512i idx = _mm512_mullo_epi32(
            _mm512_add_epi32(_mm512_set1_epi32(j), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                                                     10, 11, 12, 13, 14, 15)),
            _mm512_set1_epi32(K));
        const uint8_t *g = (const uint8_t *)w->data + (size_t)(c0 + j) * K / 2;
        for (int k = 0; k < K; k += 4) {
            __m512i v = grouped
                            ? q4_run(g, k)
                            : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, q + k, 1);
            _mm512_storeu_si512(bp + (size_t)(k / 2) * ncp + j, pair(v, 0));
            _mm512_storeu_si512(bp + (size_t)(k / 2 + 1) * ncp + j, pair(v, 1));
        }
        for (int bl = 0; bl < blocks; bl++)
            for (int jj = j; jj < j + 16; jj++)
                dwp[(size_t)bl * ncp + jj] =
                    jj >= nc           ? 0.0f
                    : w->type == DT_Q6 ? cpu_q6_scale(w, K, c0 + jj, bl)
                    : grouped          ? cpu_q4_scale(w, K, c0 + jj, bl)
                                       : simd_half(w->scales[(size_t)(c0 + jj) * blocks + bl]);
    }
}

INLINE void gemm_tile(float *y, int N, const uint32_t *xp, int kp, const float *dx, int blocks,
                      const uint32_t *bp, const float *dwp, int ncp, int mr, const float *bias,
                      int valid)
{
    __m512 acc[MR][2];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int bl = 0; bl < blocks; bl++) {
        __m512 in[MR][2];
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
            in[r][0] = in[r][1] = _mm512_setzero_ps();
        /* matmul_bf16.c's tile loop, over one block: shared through one inline function, GCC 12
         * kept an accumulator of this loop on the stack (prefill ~1,540 -> ~1,230 tok/s) */
        for (int k2 = bl * PAIRS; k2 < (bl + 1) * PAIRS; k2++) {
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + (size_t)k2 * ncp);
            __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + (size_t)k2 * ncp + 16);
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) {
                __m512bh a = (__m512bh)_mm512_set1_epi32((int)xp[(size_t)r * kp + k2]);
                in[r][0] = _mm512_dpbf16_ps(in[r][0], a, b0);
                in[r][1] = _mm512_dpbf16_ps(in[r][1], a, b1);
            }
        }
        __m512 w0 = _mm512_loadu_ps(dwp + (size_t)bl * ncp),
               w1 = _mm512_loadu_ps(dwp + (size_t)bl * ncp + 16);
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            __m512 d = _mm512_set1_ps(dx[(size_t)r * blocks + bl]);
            acc[r][0] = _mm512_fmadd_ps(in[r][0], _mm512_mul_ps(d, w0), acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(in[r][1], _mm512_mul_ps(d, w1), acc[r][1]);
        }
    }
    tile_store(y, N, acc, mr, bias, valid);
}

/* y[n, N] from the quantised activations xq [n][K] and their scales dx [n][blocks] */
static int gemm_q8(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                   const kb_mat *w, const float *bias, uint32_t *xp)
{
    int kp = K / 2, blocks = K / DT_Q8_BLOCK, chunks = (N + CPU_PANEL - 1) / CPU_PANEL;
    size_t panel = (size_t)kp * CPU_PANEL + (size_t)blocks * CPU_PANEL +
                   (w->type == DT_Q4 || w->type == DT_Q6 ? (size_t)K * CPU_PANEL / 4 : 0);
    uint16_t bf[256];
    for (int v = 0; v < 256; v++)
        bf[v] = dt_f32_to_bf16((float)(int8_t)v);
#pragma omp parallel num_threads(b->threads)
    {
#pragma omp for schedule(static)
        for (size_t i = 0; i < (size_t)n * kp; i++)
            xp[i] = bf[(uint8_t)xq[2 * i]] | (uint32_t)bf[(uint8_t)xq[2 * i + 1]] << 16;
        uint32_t *bp = xp + (size_t)n * kp + panel * (size_t)omp_get_thread_num();
        float *dwp = (float *)(bp + (size_t)kp * CPU_PANEL);
        int8_t *room = (int8_t *)(dwp + (size_t)blocks * CPU_PANEL);
#pragma omp for schedule(dynamic)
        for (int c = 0; c < chunks; c++) {
            int c0 = c * CPU_PANEL, nc = N - c0 < CPU_PANEL ? N - c0 : CPU_PANEL,
                ncp = (nc + NR - 1) / NR * NR;
            pack_panel(bp, dwp, w, K, c0, nc, ncp, room);
            for (int j = 0; j < ncp; j += NR) {
                const float *bj = bias ? bias + c0 + j : NULL;
                int m = 0;
                for (; m + MR <= n; m += MR)
                    gemm_tile(y + (size_t)m * N + c0 + j, N, xp + (size_t)m * kp, kp,
                              dx + (size_t)m * blocks, blocks, bp + j, dwp + j, ncp, MR, bj,
                              nc - j);
                if (m < n)
                    gemm_tile(y + (size_t)m * N + c0 + j, N, xp + (size_t)m * kp, kp,
                              dx + (size_t)m * blocks, blocks, bp + j, dwp + j, ncp, n - m, bj,
                              nc - j);
            }
        }
    }
    return 0;
}
#else
/* Without AVX-512 BF16, many tokens take OpenBLAS's GEMM on the dequantised values instead: each
 * product of a weight and an activation, (q_w d_w)(q_x d_x), is the definition's term rounded once
 * in f32, so the result stays within 1e-6 of the definition while the GEMM runs at about twice the
 * integer tiles' speed (about 1000 against 540 tok/s for a 512-token prefill of the 124M shape on
 * two Zen 4 cores). */

/* stored rows [c0, c1) of w, each K long (the reduction), as f32 columns: [K][c1 - c0]; 16 columns
 * at a time, so that each line written is one output row's 16 floats (a column at a time wrote a
 * line per value and made q8 prefill 40% slower) */
static void dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    size_t nc = (size_t)(c1 - c0), blocks = (size_t)K / DT_Q8_BLOCK;
    for (size_t j0 = 0; j0 < nc; j0 += 16) {
        size_t nj = nc - j0 < 16 ? nc - j0 : 16;
        const int8_t *q = (const int8_t *)w->data + (c0 + j0) * (size_t)K;
        for (size_t bl = 0; bl < blocks; bl++) {
            float d[16];
            for (size_t j = 0; j < nj; j++)
                d[j] = simd_half(w->scales[(c0 + j0 + j) * blocks + bl]);
            for (size_t i = bl * DT_Q8_BLOCK; i < (bl + 1) * DT_Q8_BLOCK; i++)
                for (size_t j = 0; j < nj; j++)
                    p[i * nc + j0 + j] = q[j * K + i] * d[j];
        }
    }
}

#endif

int cpu_quant_product(kb_backend *b, float *y, const float *x, int n, int K, int N, const kb_mat *w,
                      const float *bias, kb_act act)
{
    if (K % DT_Q8_BLOCK || K > 256 * DT_Q8_BLOCK)
        return err_set("a %s product over %d values (the kernel takes multiples of %d up to 8,192)",
                       dt_name(w->type), K, DT_Q8_BLOCK);
    int q4 = w->type == DT_Q4, q6 = w->type == DT_Q6;
#if !defined(CPU_Q8_TOKENS) && defined(__AVX2__) && defined(__FMA__)
    /* two tokens as two decode steps: their products are the tile's bit for bit, in 80% of the
     * tile's time (a drafter's catch-up of 2 positions each round, a verify pass of 2) */
    if (n == 2 && !q4 && !q6)
        return cpu_quant_product(b, y, x, 1, K, N, w, bias, act) ||
                       cpu_quant_product(b, y + N, x + K, 1, K, N, w, bias, act)
                   ? -1
                   : 0;
#endif
    int blocks = K / DT_Q8_BLOCK, gemm = n > CPU_STREAM_MAX_TOKENS;
    /* the activations' int8 values, their scales, and for a GEMM their f32 values and the panels
     * (for a few tokens, the room cpu_q8_tokens or cpu_q4_rows takes) */
    size_t iq = ((size_t)n * K + 3) / 4 * (n == 1 ? 3 : 1), nx = gemm ? (size_t)n * K : 0;
    size_t more = gemm ? (size_t)cpu_max_threads(b) * K * CPU_PANEL + CPU_PANEL
                  : q4 ? cpu_q4_rows_room(n, K)
                  : q6 ? cpu_q6_rows_room(n, K)
                       : 0;
#ifdef CPU_Q8_TOKENS
    if (n > 1 && !gemm && !q4 && !q6)
        more = CPU_Q8_TOKENS_ROOM(n, K);
#endif
    float *scratch = cpu_scratch(b, iq + (size_t)n * blocks + nx + more);
    if (!scratch)
        return -1;
    int8_t *xq = (int8_t *)scratch;
    float *dx = scratch + iq, *xf = dx + (size_t)n * blocks;
#pragma omp parallel for num_threads(b->threads) if (n > 4)
    for (int t = 0; t < n; t++) {
        dt_q8_quantize(xq + (size_t)t * K, NULL, dx + (size_t)t * blocks, x + (size_t)t * K,
                       (size_t)K);
#ifndef __AVX512BF16__
        for (int k = 0; k < K && gemm; k++) /* the f32 GEMM's input: the quantised values */
            xf[(size_t)t * K + k] =
                xq[(size_t)t * K + k] * dx[(size_t)t * blocks + k / DT_Q8_BLOCK];
#endif
    }
    if (gemm) {
#ifdef __AVX512BF16__
        /* xf's room holds the bf16 pairs (K / 2 a token), each thread's panel room its pairs and
         * scales */
        int rc = gemm_q8(b, y, xq, dx, n, K, N, w, bias, (uint32_t *)xf);
#else
        int rc = cpu_gemm_panels(b, y, xf, n, K, N, w, bias,
                                 q4 ? cpu_q4_dequantize_panel
                                 : q6 ? cpu_q6_dequantize_panel
                                      : dequantize_panel,
                                 xf + nx);
#endif
        return rc ? rc : act == KB_GELU ? cpu_gelu(b, y, (size_t)n * N) : 0;
    }
    if (q4 || q6) {
        (q4 ? cpu_q4_rows : cpu_q6_rows)(b, y, xq, dx, n, K, N, w, bias, act, xf);
        return 0;
    }
#ifdef CPU_Q8_TOKENS
    if (n > 1) {
        cpu_q8_tokens(b, y, xq, dx, n, K, N, w, bias, act, xf);
        return 0;
    }
#endif
#if defined(__AVX2__) && defined(__FMA__)
    if (n == 1) { /* xq's room holds |x| after x, then x's sign bits */
        decode_q8(y, xq, xq + K, (uint64_t *)(xq + 2 * K), dx, K, N, w, bias, act, b->threads);
        return 0;
    }
#endif
    const int8_t *q = w->data;
    /* one token (decode) streams the rows one at a time: measured faster than pairs (183 against
     * 114 tok/s on the 124M shape), where for many tokens pairs are (660 against 568) */
    int per = n == 1 ? 1 : ROWS, tiles = (N + per - 1) / per;
#pragma omp parallel for num_threads(b->threads) schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        int j0 = tile * per, nr = N - j0 < per ? N - j0 : per;
        float dw[ROWS * 256], out[TOKENS][ROWS]; /* 256 blocks: reductions up to 8,192 */
        /* F16C eight at a time (one at a time was a tenth of a decode step's product) */
        dt_to_f32(dw, w->scales + (size_t)j0 * blocks, DT_F16, (size_t)nr * blocks);
        for (int t0 = 0; t0 < n; t0 += TOKENS) {
            int nt = n - t0 < TOKENS ? n - t0 : TOKENS;
            const int8_t *wt = q + (size_t)j0 * K, *xt = xq + (size_t)t0 * K;
            /* the tile inlined for each constant shape of whole rows, so its loops unroll into
             * registers: through the variable shape a pass of 3 tokens (a verify pass) cost more
             * than 3 decode steps */
            const float *dxt = dx + (size_t)t0 * blocks;
            if (n == 1)
                tile_q8(out, wt, dw, 1, xt, dx, 1, K);
            else if (nr == ROWS && nt == TOKENS)
                tile_q8(out, wt, dw, ROWS, xt, dxt, TOKENS, K);
            else if (nr == ROWS && nt == 3)
                tile_q8(out, wt, dw, ROWS, xt, dxt, 3, K);
            else if (nr == ROWS && nt == 2) /* 6 tokens, say */
                tile_q8(out, wt, dw, ROWS, xt, dxt, 2, K);
            else if (nr == ROWS && nt == 1)
                tile_q8(out, wt, dw, ROWS, xt, dxt, 1, K);
            else
                tile_q8(out, wt, dw, nr, xt, dxt, nt, K);
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < nr;
                     r++) { /* the GELU here, by every thread, not in a pass on one */
                    float v = (bias ? bias[j0 + r] : 0.0f) + out[t][r];
                    y[(size_t)(t0 + t) * N + j0 + r] = act == KB_GELU ? vm_gelu(v) : v;
                }
        }
    }
    return 0;
}
