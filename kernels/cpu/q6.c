/* Products against 6-bit weights (DT_Q6: a q4 model's tied token embedding and LM head, stored a
 * row per output along the reduction, the layout of dtype.h). The activations are quantised to
 * q8_0 blocks as for 8-bit weights (q8.c does that and calls here), so a block's dot product is an
 * exact integer sum of (q - 32) * x, made as sum(q * x) - 32 * sum(x) with the values q (0..63) the
 * unsigned side of the u8 x s8 dot instructions as they are.
 *
 * A row's sum is defined as q4.c's columns are (groups.h's cpu_block_ref): each block's integer,
 * scaled by d_w * d_x (rounded once, in f32) and added by one fused multiply-add, block after
 * block.
 *
 * With AVX-512 VBMI and VNNI the rows are packed at load (cpu_q6_pack, backend.h) in groups of 16,
 * the lanes of a vector: a block's four values of each row are three bytes, the 16 rows' side by
 * side (48 bytes), which one byte permute spreads to four bytes a lane and one multishift cuts
 * into a byte a value; a dot instruction then takes four values of each row against the same four
 * activations, and a block's integer is whole in a lane. The 124M shape's LM head (50257 x 768)
 * so takes 0.85 ms on one Zen 4 core against q8's 1.25 (a row at a time, blocks in lanes and
 * their integers summed across lanes, it took 1.4: bound by its instructions, not the memory).
 * AVX2 goes a row at a time, eight blocks' lane sums folded together; plain C is cpu_block_ref.
 *
 * Up to CPU_STREAM_MAX_TOKENS tokens one loop streams the rows, each read once for all the tokens
 * and each token's sums the same whatever the count; more tokens take q8.c's GEMM on the values
 * (cpu_q6_values). Every output is one thread's, so results do not depend on the thread count. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "groups.h"
#include "simd.h"
#include "vecmath.h"

#if defined(CPU_Q8_TOKENS) && defined(__AVX512VBMI__)
#define Q6_GROUPS 1
#elif defined(__AVX2__) && defined(__FMA__)
#define Q6_ROWS 1
#endif

enum {
    BLK = DT_Q6_BLOCK,
    BYTES = DT_Q6_BLOCK_BYTES,
    GROUP = CPU_Q6_GROUP,
    RUN = 3 * GROUP,  /* a packed block's four values of each of the group's rows */
    GBLOCK = 8 * RUN, /* a packed group's block */
    SLACK = 64        /* a packed copy's last run is read as 64 bytes */
};

/* row j's block b as its 24 stored bytes (from a packed group's eight runs, 3 bytes each) */
static void block_bytes(uint8_t dst[BYTES], const kb_mat *w, int K, int j, int b)
{
    size_t blocks = (size_t)K / BLK;
    const uint8_t *d = w->data;
    if (!w->column_blocks) {
        memcpy(dst, d + ((size_t)j * blocks + b) * BYTES, BYTES);
        return;
    }
    const uint8_t *g = d + ((size_t)j / GROUP * blocks + b) * GBLOCK + j % GROUP * 3;
    for (int r = 0; r < 8; r++)
        memcpy(dst + 3 * r, g + r * RUN, 3);
}

float cpu_q6_scale(const kb_mat *w, int K, int j, int b)
{
    size_t blocks = (size_t)K / BLK;
    return simd_half(w->column_blocks
                         ? w->scales[((size_t)j / GROUP * blocks + b) * GROUP + j % GROUP]
                         : w->scales[(size_t)j * blocks + b]);
}

#if defined(Q6_GROUPS)
#define CPU_Q6_ROOM(n, K) ((size_t)(n) * (K) / BLK * 4)

/* y's 16 rows of a packed group for NT tokens (gw: its bytes, gs: its scales) */
INLINE void group_q6(float *y, int N, int j, const uint8_t *gw, const uint16_t *gs,
                     const int8_t *xq, const float *dx, const int32_t *c, const float *bias, int NT,
                     int K, int blocks)
{
    /* byte 8m + i of a run takes its byte 6m + i (two rows' 6 bytes to a 64-bit lane), then byte
     * i of each 64-bit lane the 8 bits from bit 6i: values 4 to a row, a row to a 32-bit lane */
    const __m512i spread = _mm512_set_epi8(
        47, 46, 47, 46, 45, 44, 43, 42, 41, 40, 41, 40, 39, 38, 37, 36, 35, 34, 35, 34, 33, 32, 31,
        30, 29, 28, 29, 28, 27, 26, 25, 24, 23, 22, 23, 22, 21, 20, 19, 18, 17, 16, 17, 16, 15, 14,
        13, 12, 11, 10, 11, 10, 9, 8, 7, 6, 5, 4, 5, 4, 3, 2, 1, 0);
    const __m512i shifts = _mm512_set1_epi64(0x2a241e18120c0600), m6 = _mm512_set1_epi8(63);
    __m512 acc[CPU_STREAM_MAX_TOKENS];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        __m512i v[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m512i raw = _mm512_loadu_si512(gw + ((size_t)b * 8 + r) * RUN);
            v[r] = _mm512_and_si512(
                _mm512_multishift_epi64_epi8(shifts, _mm512_permutexvar_epi8(spread, raw)), m6);
        }
        __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gs + (size_t)b * GROUP)));
        cpu_group_block(acc, v, dw, xq, dx, c, NT, K, blocks, b);
    }
    cpu_group_store(y, N, j, acc, bias, NT);
}

int cpu_q6_pack(kb_backend *b, kb_mat *out, const kb_mat *w)
{
    *out = (kb_mat){0};
    size_t N = (size_t)w->rows, K = (size_t)w->cols, blocks = K / BLK;
    size_t groups = (N + GROUP - 1) / GROUP, bytes = groups * blocks * GBLOCK;
    if (w->column_blocks || K % BLK)
        return 0;
    uint8_t *d = b->alloc(b, bytes + groups * blocks * GROUP * 2 + SLACK, "6-bit rows in groups");
    if (!d)
        return -1;
    uint16_t *sc = (uint16_t *)(d + bytes);
    memset(d, 0, bytes + groups * blocks * GROUP * 2 + SLACK); /* the last group's missing rows */
    const uint8_t *src = w->data;
    for (size_t j = 0; j < N; j++)
        for (size_t bl = 0; bl < blocks; bl++) {
            size_t g = j / GROUP * blocks + bl;
            for (int r = 0; r < 8; r++)
                memcpy(d + g * GBLOCK + r * RUN + j % GROUP * 3,
                       src + (j * blocks + bl) * BYTES + 3 * r, 3);
            sc[g * GROUP + j % GROUP] = w->scales[j * blocks + bl];
        }
    *out = *w;
    out->data = d;
    out->scales = sc;
    out->column_blocks = 1;
    return 0;
}
#elif defined(Q6_ROWS)
/* a block's 32 values (0..63) from its 24 bytes: three bytes to four values in each 32-bit lane */
INLINE __m256i block_values(const uint8_t *blk)
{
    uint8_t pad[32] = {0};
    memcpy(pad, blk, BYTES);
    __m256i v = _mm256_loadu2_m128i((const __m128i *)(pad + 12), (const __m128i *)pad);
    v = _mm256_shuffle_epi8(v,
                            _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                             0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1));
    __m256i m = _mm256_set1_epi32(63);
    __m256i r = _mm256_and_si256(v, m);
    r = _mm256_or_si256(r, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v, 6), m), 8));
    r = _mm256_or_si256(r, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v, 12), m), 16));
    return _mm256_or_si256(r, _mm256_slli_epi32(_mm256_srli_epi32(v, 18), 24));
}

/* the sums of 8 vectors' lanes, vector i's in lane i (integers: any order is the same) */
INLINE __m256i lane_sums8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    /* [vectors 0-3's lanes 0-3 | their lanes 4-7], the same for vectors 4-7 */
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                            _mm256_permute2x128_si256(ab, cd, 0x31));
}

/* out[t] = row j's sums for NT tokens: eight blocks' integers at a time, then cpu_block_ref's fused
 * multiply-adds in block order */
INLINE void row_q6(float *out, const uint8_t *w, const uint16_t *dw, const int8_t *xq,
                   const float *dx, int NT, int K, int blocks)
{
    for (int t = 0; t < NT; t++)
        out[t] = 0;
    for (int b0 = 0; b0 < blocks; b0 += 8) {
        int nb = blocks - b0 < 8 ? blocks - b0 : 8;
        __m256i wv[8];
        for (int i = 0; i < nb; i++)
            wv[i] = block_values(w + (size_t)(b0 + i) * BYTES);
        for (int t = 0; t < NT; t++) {
            __m256i d[8];
            for (int i = 0; i < 8; i++) {
                if (i >= nb) {
                    d[i] = _mm256_setzero_si256();
                    continue;
                }
                __m256i x = _mm256_loadu_si256(
                    (const __m256i *)(xq + (size_t)t * K + (size_t)(b0 + i) * BLK));
                __m256i p = _mm256_maddubs_epi16(wv[i], x); /* 2 * 63 * 128 fits 16 bits */
                __m256i sx = _mm256_maddubs_epi16(_mm256_set1_epi8(32), x);
                d[i] = _mm256_madd_epi16(_mm256_sub_epi16(p, sx), _mm256_set1_epi16(1));
            }
            int32_t s[8];
            _mm256_storeu_si256((__m256i *)s, lane_sums8(d));
            float acc = out[t];
            for (int i = 0; i < nb; i++)
                acc =
                    fmaf(simd_half(dw[b0 + i]) * dx[(size_t)t * blocks + b0 + i], (float)s[i], acc);
            out[t] = acc;
        }
    }
}
#endif

#if !defined(Q6_GROUPS) /* rows as they are */
#define CPU_Q6_ROOM(n, K) ((void)(n), (void)(K), 0)

int cpu_q6_pack(kb_backend *b, kb_mat *out, const kb_mat *w)
{
    (void)b, (void)w;
    *out = (kb_mat){0};
    return 0;
}
#endif

size_t cpu_q6_rows_room(int n, int K) { return (CPU_Q6_ROOM(n, K) + 3) / 4; }

#define GROUPS_FOR(NT)                                             \
    for (int j = j0; j < j1; j += GROUP)                           \
        group_q6(y, N, j, q + (size_t)j / GROUP * blocks * GBLOCK, \
                 w->scales + (size_t)j / GROUP * blocks * GROUP, xq, dx, c, bias, NT, K, blocks);
#define ROWS_FOR(NT)                                                                               \
    for (int j = j0; j < j1; j++) {                                                                \
        float out[CPU_STREAM_MAX_TOKENS];                                                          \
        row_q6(out, q + (size_t)j * blocks * BYTES, w->scales + (size_t)j * blocks, xq, dx, NT, K, \
               blocks);                                                                            \
        cpu_row_store(y, N, j, out, bias, NT);                                                     \
    }
#define COLUMNS_FOR(NT) CPU_BLOCK_REF_FOR(NT, cpu_q6_values, cpu_q6_scale)

void cpu_q6_rows(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                 const kb_mat *w, const float *bias, kb_act act, void *room)
{
    int blocks = K / BLK;
    const uint8_t *q = w->data;
    (void)q, (void)blocks, (void)room;
#if defined(Q6_GROUPS)
    if (w->column_blocks) {
        int32_t *c = room;
        cpu_group_offsets(c, xq, n, K, 32);
        CPU_STREAM_ROWS(b, y, n, N, GROUP, act, GROUPS_FOR)
        return;
    }
    CPU_STREAM_ROWS(b, y, n, N, 1, act, COLUMNS_FOR)
#elif defined(Q6_ROWS)
    CPU_STREAM_ROWS(b, y, n, N, 1, act, ROWS_FOR)
#else
    CPU_STREAM_ROWS(b, y, n, N, 1, act, COLUMNS_FOR)
#endif
}

void cpu_q6_values(int8_t *dst, const kb_mat *w, int row, int K)
{
    for (int b = 0; b < K / BLK; b++) {
        uint8_t by[BYTES];
        block_bytes(by, w, K, row, b);
        for (int i = 0; i < BLK; i++)
            dst[b * BLK + i] = (int8_t)dt_q6_value(by, i);
    }
}

void cpu_q6_row(float *dst, const kb_mat *w, int row, int K)
{
    for (int b = 0; b < K / BLK; b++) {
        uint8_t by[BYTES];
        block_bytes(by, w, K, row, b);
        float d = cpu_q6_scale(w, K, row, b);
        for (int i = 0; i < BLK; i++)
            dst[b * BLK + i] = (float)dt_q6_value(by, i) * d;
    }
}

void cpu_q6_dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    cpu_block_panel(p, w, K, c0, c1, cpu_q6_values, cpu_q6_scale);
}
