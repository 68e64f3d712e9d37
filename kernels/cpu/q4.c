/* Products against 4-bit weights (DT_Q4, llama.cpp's q4_0; the layout is kb_mat's, as DT_Q8's with
 * 16 bytes a block). The activations are quantised to q8_0 blocks as for 8-bit weights (q8.c does
 * that and calls here), so a block's dot product is the integer sum over its 32 values of
 * (q - 8) * x, made exact as sum(q * x) - 8 * sum(x): the nibbles q (0..15) are the unsigned side
 * of the u8 x s8 dot instructions as they are, and -8 * sum(x) is made once a token and starts
 * each dot product. Each block's integer is then scaled by d_w * d_x (rounded once, in f32) and
 * summed in f32.
 *
 * Up to CPU_STREAM_MAX_TOKENS tokens one loop streams the weight rows, each row read once for all
 * the tokens and each token's sums in its own accumulator in the same order whatever the count:
 * a verify pass's rows are its decode steps' bit for bit. Every output is one thread's, so results
 * do not depend on the thread count. More tokens take q8.c's GEMM over panels this file unpacks. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"
#include "simd.h"
#include "vecmath.h"

enum { HALF = DT_Q4_BLOCK / 2 };

/* value i (0..31) of a block's 16 bytes, its nibble less 8 */
INLINE int nibble(const uint8_t *blk, int i)
{
    return (i < HALF ? blk[i] & 15 : blk[i - HALF] >> 4) - 8;
}

#if defined(CPU_Q8_TOKENS)
/* AVX-512: two blocks a vector. A pair's 32 bytes are loaded into both halves and the high half
 * shifted by 4, so that the vector's quarters hold block b's values 0-15, block b + 1's 0-15, b's
 * 16-31, b + 1's 16-31 with no shuffle; the tokens' values are laid out in that order once (prep),
 * and the lanes' scales follow the same quarters (LANES). An odd last block is a pair with an
 * empty second block (zero values, zero scale). */
enum { PAIR = 2 * DT_Q4_BLOCK };

typedef struct {
    int8_t *x;  /* [n][pairs * PAIR]: the values in the quarters' order */
    int32_t *c; /* [n][pairs * 16]: -8 times each lane's sum of four values */
    float *d;   /* [n][pairs * 2]: the block scales, 0 for an empty block */
    int pairs;
} prep;

#define CPU_Q4_PREP_BYTES(n, K) ((size_t)(n) * (((K) / 64 + 1) * (64 + 64 + 8)) + 64)

static prep prepare(const int8_t *xq, const float *dx, int n, int K, void *room)
{
    int blocks = K / DT_Q4_BLOCK, pairs = (blocks + 1) / 2;
    prep p = {.pairs = pairs};
    p.x = (int8_t *)(((uintptr_t)room + 63) & ~(uintptr_t)63);
    p.c = (int32_t *)(p.x + (size_t)n * pairs * PAIR);
    p.d = (float *)(p.c + (size_t)n * pairs * 16);
    for (int t = 0; t < n; t++) {
        const int8_t *xt = xq + (size_t)t * K;
        for (int b = 0; b < 2 * pairs; b++) {
            int8_t *o = p.x + (size_t)t * pairs * PAIR + b / 2 * PAIR + b % 2 * HALF;
            if (b < blocks) {
                memcpy(o, xt + b * DT_Q4_BLOCK, HALF);
                memcpy(o + 2 * HALF, xt + b * DT_Q4_BLOCK + HALF, HALF);
            } else {
                memset(o, 0, HALF);
                memset(o + 2 * HALF, 0, HALF);
            }
            p.d[(size_t)t * pairs * 2 + b] = b < blocks ? dx[(size_t)t * blocks + b] : 0.0f;
        }
        for (int q = 0; q < pairs; q++) {
            __m512i v = _mm512_loadu_si512(p.x + ((size_t)t * pairs + q) * PAIR);
            __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(8), v);
            _mm512_storeu_si512(p.c + ((size_t)t * pairs + q) * 16,
                                _mm512_sub_epi32(_mm512_setzero_si512(), s));
        }
    }
    return p;
}

/* pair q's 64 nibbles of a row, in the quarters' order (only its first 16 bytes when `one`) */
INLINE __m512i unpack(const uint8_t *w, int q, int one)
{
    __m256i v = one ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(w + q * 2 * HALF)))
                    : _mm256_loadu_si256((const __m256i *)(w + q * 2 * HALF));
    __m512i b = _mm512_broadcast_i64x4(v);
    b = _mm512_srlv_epi16(b, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1));
    return _mm512_and_si512(b, _mm512_set1_epi8(15));
}

/* out[t] = the row's sum for NT tokens (dw: the row's f16 scales). Each block's scale product
 * dw * dx is made first for the whole row, sixteen at a time, and the scales of the row four on
 * are fetched meanwhile: they are a stream of their own, and loads of them waited on the memory
 * (a third of one thread's decode time) */
INLINE void row_q4(float *out, const uint8_t *w, const uint16_t *dw, const prep *p, int NT,
                   int blocks)
{
    float s[CPU_STREAM_MAX_TOKENS][256 + 16]; /* reductions up to 8,192 */
    int span = 2 * p->pairs;
    for (int o = 0; o < 2 * blocks; o += 64) /* the scales of the row 4 on */
        _mm_prefetch((const char *)(dw + 4 * blocks) + o, _MM_HINT_T0);
    for (int b = 0; b < blocks; b += 16) {
        __mmask16 m = blocks - b >= 16 ? 0xffff : (__mmask16)((1u << (blocks - b)) - 1);
        __m512 d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, dw + b));
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) /* past the last block: 0 * 0 */
            _mm512_storeu_ps(
                s[t] + b, _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, p->d + (size_t)t * span + b)));
    }
    const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    __m512 acc[CPU_STREAM_MAX_TOKENS];
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int q = 0; q < p->pairs; q++) {
        __m512i wv = unpack(w, q, 2 * q + 1 == blocks);
#pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            size_t at = (size_t)t * p->pairs + q;
            __m512i dot = _mm512_dpbusd_epi32(_mm512_loadu_si512(p->c + at * 16), wv,
                                              _mm512_loadu_si512(p->x + at * PAIR));
            __m512 sc = _mm512_permutexvar_ps(
                lanes,
                _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(s[t] + 2 * q)))));
            acc[t] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(dot), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; t++)
        out[t] = vsum8(
            _mm256_add_ps(_mm512_castps512_ps256(acc[t]),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1))));
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

#define CPU_Q4_PREP_BYTES(n, K) ((size_t)(n) * (K) + 64)

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
/* plain C: each block's integer, scaled and summed in order */
typedef struct {
    const int8_t *x;
    const float *d;
    int K;
} prep;

#define CPU_Q4_PREP_BYTES(n, K) 0

static prep prepare(const int8_t *xq, const float *dx, int n, int K, void *room)
{
    (void)n, (void)room;
    return (prep){xq, dx, K};
}

INLINE void row_q4(float *out, const uint8_t *w, const uint16_t *dw, const prep *p, int NT,
                   int blocks)
{
    for (int t = 0; t < NT; t++) {
        float acc = 0;
        for (int b = 0; b < blocks; b++) {
            int32_t d = 0;
            for (int i = 0; i < DT_Q4_BLOCK; i++)
                d += nibble(w + b * HALF, i) * p->x[(size_t)t * p->K + b * DT_Q4_BLOCK + i];
            acc += simd_half(dw[b]) * p->d[(size_t)t * blocks + b] * (float)d;
        }
        out[t] = acc;
    }
}
#endif

size_t cpu_q4_rows_room(int n, int K) { return (CPU_Q4_PREP_BYTES(n, K) + 3) / 4; }

/* the row loop for a constant token count, so that the accumulators stay in registers */
#define ROWS_FOR(NT)                                                                        \
    for (int j = j0; j < j1; j++) {                                                         \
        float out[CPU_STREAM_MAX_TOKENS];                                                   \
        row_q4(out, q + (size_t)j * K / 2, w->scales + (size_t)j * blocks, &p, NT, blocks); \
        for (int t = 0; t < NT; t++)                                                        \
            y[(size_t)t * N + j] = (bias ? bias[j] : 0.0f) + out[t];                        \
    }

void cpu_q4_rows(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                 const kb_mat *w, const float *bias, kb_act act, void *room)
{
    int blocks = K / DT_Q4_BLOCK;
    prep p = prepare(xq, dx, n, K, room);
    const uint8_t *q = w->data;
    CPU_STREAM_ROWS(b, y, n, N, act, ROWS_FOR)
}

void cpu_q4_dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1)
{
    size_t nc = (size_t)(c1 - c0), blocks = (size_t)K / DT_Q4_BLOCK;
    for (size_t j = 0; j < nc; j++) {
        const uint8_t *row = (const uint8_t *)w->data + (c0 + j) * (size_t)K / 2;
        for (size_t bl = 0; bl < blocks; bl++) {
            float d = simd_half(w->scales[(c0 + j) * blocks + bl]);
            for (int i = 0; i < DT_Q4_BLOCK; i++)
                p[(bl * DT_Q4_BLOCK + i) * nc + j] = (float)nibble(row + bl * HALF, i) * d;
        }
    }
}

void cpu_q4_values(int8_t *dst, const kb_mat *w, int row, int K)
{
    const uint8_t *r = (const uint8_t *)w->data + (size_t)row * K / 2;
    for (int b = 0; b < K / DT_Q4_BLOCK; b++) {
#ifdef __SSE2__ /* a GEMM unpacks every weight: a block in four instructions, not 32 */
        __m128i v = _mm_loadu_si128((const __m128i *)(r + b * HALF)), m = _mm_set1_epi8(15),
                e = _mm_set1_epi8(8);
        _mm_storeu_si128((__m128i *)(dst + b * DT_Q4_BLOCK), _mm_sub_epi8(_mm_and_si128(v, m), e));
        _mm_storeu_si128((__m128i *)(dst + b * DT_Q4_BLOCK + HALF),
                         _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), e));
#else
        for (int i = 0; i < DT_Q4_BLOCK; i++)
            dst[b * DT_Q4_BLOCK + i] = (int8_t)nibble(r + b * HALF, i);
#endif
    }
}
