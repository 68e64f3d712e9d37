/* Products against 4-bit weights (DT_Q4, llama.cpp's q4_0; the layout is kb_mat's, as DT_Q8's with
 * 16 bytes a block). The activations are quantised to q8_0 blocks as for 8-bit weights (q8.c does
 * that and calls here), so a block's dot product is the integer sum over its 32 values of
 * (q - 8) * x, made exact as sum(q * x) - 8 * sum(x): the nibbles q (0..15) are the unsigned side
 * of the u8 x s8 dot instructions as they are, and -8 * sum(x) is made once a token and starts
 * each dot product.
 *
 * With AVX-512 VNNI the weights are packed at load (cpu_q4_pack) in groups of 16 output columns,
 * the lanes of a vector: a block's 4-byte runs of the 16 columns side by side, so that a dot
 * instruction takes four values of each column against the same four activations (broadcast).
 * A column's sum is then defined as cpu_block_ref (groups.h) computes it: each block's integer,
 * scaled by d_w * d_x (rounded once, in f32) and added by one fused multiply-add, block after
 * block; packed
 * or not, the results are the same bit for bit. A row at a time, a vector's lanes held parts of
 * blocks and each row ended in a sum across lanes: from the caches a third of the instructions
 * and twice the pace (a 768 x 768 product 24 -> 52 GB/s on one Zen 4 core, build/matvec_bw).
 * Without AVX-512 VNNI the rows stay as they are: AVX2 sums lanes of blocks, plain C cpu_block_ref.
 *
 * Up to CPU_STREAM_MAX_TOKENS tokens one loop streams the weights, each read once for all the
 * tokens and each token's sums in its own accumulator in the same order whatever the count: a
 * verify pass's rows are its decode steps' bit for bit. Every output is one thread's, so results
 * do not depend on the thread count. More tokens take q8.c's GEMM over panels this file unpacks. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "groups.h"
#include "simd.h"
#include "vecmath.h"

enum { HALF = DT_Q4_BLOCK / 2, GROUP = CPU_Q4_GROUP };

/* value i (0..31) of a block's 16 bytes, its nibble less 8 */
INLINE int nibble(const uint8_t *blk, int i)
{
    return (i < HALF ? blk[i] & 15 : blk[i - HALF] >> 4) - 8;
}

/* column j's block b as its 16 stored bytes (from a packed group's four runs, 4 bytes each) */
INLINE void block_bytes(uint8_t dst[HALF], const kb_mat *w, int K, int j, int b)
{
    size_t blocks = (size_t)K / DT_Q4_BLOCK;
    const uint8_t *d = w->data;
    if (!w->column_blocks) {
        memcpy(dst, d + (size_t)j * K / 2 + (size_t)b * HALF, HALF);
        return;
    }
    const uint8_t *g = d + ((size_t)j / GROUP * blocks + b) * GROUP * HALF + j % GROUP * 4;
    for (int q = 0; q < 4; q++)
        memcpy(dst + 4 * q, g + q * 4 * GROUP, 4);
}

float cpu_q4_scale(const kb_mat *w, int K, int j, int b)
{
    size_t blocks = (size_t)K / DT_Q4_BLOCK;
    return simd_half(w->column_blocks
                         ? w->scales[((size_t)j / GROUP * blocks + b) * GROUP + j % GROUP]
                         : w->scales[(size_t)j * blocks + b]);
}

#if defined(CPU_Q8_TOKENS)
#define CPU_Q4_ROOM(n, K) ((size_t)(n) * (K) / DT_Q4_BLOCK * 4)

/* y's 16 columns of a packed group for NT tokens (gw: its bytes, gs: its scales) */
INLINE void group_q4(float *y, int N, int j, const uint8_t *gw, const uint16_t *gs,
                     const int8_t *xq, const float *dx, const int32_t *c, const float *bias, int NT,
                     int K, int blocks)
{
    __m512 acc[CPU_STREAM_MAX_TOKENS];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int b = 0; b < blocks; b++) {
        __m512i v[8];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            __m512i r = _mm512_loadu_si512(gw + ((size_t)b * 4 + q) * 4 * GROUP);
            v[q] = _mm512_and_si512(r, m4);
            v[4 + q] = _mm512_and_si512(_mm512_srli_epi16(r, 4), m4);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gs + (size_t)b * GROUP)));
        cpu_group_block(acc, v, dw, xq, dx, c, NT, K, blocks, b);
    }
    cpu_group_store(y, N, j, acc, bias, NT);
}

int cpu_q4_pack(kb_backend *b, kb_mat *out, const kb_mat *w)
{
    *out = (kb_mat){0};
    size_t K = (size_t)w->rows, N = (size_t)w->cols, blocks = K / DT_Q4_BLOCK;
    if (w->column_blocks || N % GROUP || K % DT_Q4_BLOCK)
        return 0;
    size_t bytes = dt_bytes(DT_Q4, K * N);
    uint8_t *d = b->alloc(b, bytes + dt_scale_bytes(DT_Q4, K * N), "4-bit weights in groups");
    if (!d)
        return -1;
    uint16_t *sc = (uint16_t *)(d + bytes);
    const uint8_t *src = w->data;
    for (size_t j = 0; j < N; j++)
        for (size_t bl = 0; bl < blocks; bl++) {
            size_t g = (j / GROUP * blocks + bl) * GROUP;
            for (int q = 0; q < 4; q++)
                memcpy(d + (g * 4 + q * GROUP + j % GROUP) * 4, src + j * K / 2 + bl * HALF + 4 * q,
                       4);
            sc[g + j % GROUP] = w->scales[j * blocks + bl];
        }
    *out = *w;
    out->data = d;
    out->scales = sc;
    out->column_blocks = 1;
    return 0;
}
#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2: a block a vector, its 16 bytes and those shifted by 4 (values 0-15, then 16-31: the
 * tokens' own order); even blocks into one accumulator, odd into another */
typedef struct {
    const int8_t *x;
    int32_t *c; /* [n][blocks * 8]: -8 times each lane's sum of four values */
    const float *d;
    int K;
} prep;

#define CPU_Q4_ROOM(n, K) ((size_t)(n) * (K) + 64)

static prep prepare(const int8_t *xq, const float *dx, int n, int K, void *room)
{
    prep p = {.x = xq, .c = (int32_t *)(((uintptr_t)room + 31) & ~(uintptr_t)31), .d = dx, .K = K};
    for (size_t i = 0; i < (size_t)n * K; i += DT_Q4_BLOCK) {
        __m256i s = _mm256_maddubs_epi16(_mm256_set1_epi8(8),
                                         _mm256_loadu_si256((const __m256i *)(xq + i)));
        _mm256_storeu_si256((__m256i *)(p.c + i / 4), _mm256_madd_epi16(s, _mm256_set1_epi16(-1)));
    }
    return p;
}

INLINE __m256i dot_q4(__m256i c, __m256i w, __m256i x)
{
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(c, w, x);
#else
    /* pairs of products fit 16 bits: 2 * 15 * 128 */
    return _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
#endif
}

INLINE void row_q4(float *out, const uint8_t *w, const uint16_t *dw, const prep *p, int NT,
                   int blocks)
{
    __m256 acc[2][CPU_STREAM_MAX_TOKENS];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(w + b * HALF));
        __m256i wv =
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
        float d = simd_half(dw[b]);
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            size_t at = (size_t)t * p->K + (size_t)b * DT_Q4_BLOCK;
            __m256i dot = dot_q4(_mm256_loadu_si256((const __m256i *)(p->c + at / 4)), wv,
                                 _mm256_loadu_si256((const __m256i *)(p->x + at)));
            float s = d * p->d[(size_t)t * blocks + b];
            acc[b % 2][t] =
                _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(dot), acc[b % 2][t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        out[t] = vsum8(_mm256_add_ps(acc[0][t], acc[1][t]));
}
#else
#define CPU_Q4_ROOM(n, K) ((void)(n), (void)(K), 0)
#endif

#if !defined(CPU_Q8_TOKENS) /* rows as they are */
int cpu_q4_pack(kb_backend *b, kb_mat *out, const kb_mat *w)
{
    (void)b, (void)w;
    *out = (kb_mat){0};
    return 0;
}
#endif

size_t cpu_q4_rows_room(int n, int K) { return (CPU_Q4_ROOM(n, K) + 3) / 4; }

/* the loops for a constant token count, so that the accumulators stay in registers */
#define GROUPS_FOR(NT)                                                                            \
    for (int j = j0; j < j1; j += GROUP)                                                          \
        group_q4(y, N, j, q + (size_t)j * K / 2, w->scales + (size_t)j * blocks, xq, dx, c, bias, \
                 NT, K, blocks);
#define ROWS_FOR(NT)                                                                        \
    for (int j = j0; j < j1; j++) {                                                         \
        float out[CPU_STREAM_MAX_TOKENS];                                                   \
        row_q4(out, q + (size_t)j * K / 2, w->scales + (size_t)j * blocks, &p, NT, blocks); \
        cpu_row_store(y, N, j, out, bias, NT);                                              \
    }
#define COLUMNS_FOR(NT) CPU_BLOCK_REF_FOR(NT, cpu_q4_values, cpu_q4_scale)

void cpu_q4_rows(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                 const kb_mat *w, const float *bias, kb_act act, void *room)
{
    int blocks = K / DT_Q4_BLOCK;
    const uint8_t *q = w->data;
#if defined(CPU_Q8_TOKENS)
    if (w->column_blocks) {
        int32_t *c = room;
        cpu_group_offsets(c, xq, n, K, 8);
        CPU_STREAM_ROWS(b, y, n, N, GROUP, act, GROUPS_FOR)
        return;
    }
    CPU_STREAM_ROWS(b, y, n, N, 1, act, COLUMNS_FOR)
#elif defined(__AVX2__) && defined(__FMA__)
    prep p = prepare(xq, dx, n, K, room);
    CPU_STREAM_ROWS(b, y, n, N, 1, act, ROWS_FOR)
#else
    (void)room, (void)q, (void)blocks;
    CPU_STREAM_ROWS(b, y, n, N, 1, act, COLUMNS_FOR)
#endif
}

void cpu_q4_dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    cpu_block_panel(p, w, K, c0, c1, cpu_q4_values, cpu_q4_scale);
}

void cpu_q4_values(int8_t *dst, const kb_mat *w, int row, int K)
{
    for (int b = 0; b < K / DT_Q4_BLOCK; b++) {
        uint8_t r[HALF];
        block_bytes(r, w, K, row, b);
#ifdef __SSE2__ /* a GEMM unpacks every weight: a block in four instructions, not 32 */
        __m128i v = _mm_loadu_si128((const __m128i *)r), m = _mm_set1_epi8(15),
                e = _mm_set1_epi8(8);
        _mm_storeu_si128((__m128i *)(dst + b * DT_Q4_BLOCK), _mm_sub_epi8(_mm_and_si128(v, m), e));
        _mm_storeu_si128((__m128i *)(dst + b * DT_Q4_BLOCK + HALF),
                         _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), e));
#else
        for (int i = 0; i < DT_Q4_BLOCK; i++)
            dst[b * DT_Q4_BLOCK + i] = (int8_t)nibble(r, i);
#endif
    }
}
