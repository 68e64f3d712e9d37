#include "dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

size_t dt_size(dtype t) { return dt_elem(t); }

const char *dt_name(dtype t)
{
    return t == DT_F32    ? "f32"
           : t == DT_F16  ? "f16"
           : t == DT_BF16 ? "bf16"
           : t == DT_Q8   ? "q8"
           : t == DT_Q4   ? "q4"
           : t == DT_Q6   ? "q6"
                          : "int8";
}

int dt_parse(const char *s, dtype *out)
{
    static const struct {
        const char *name;
        dtype t;
    } names[] = {
        {"f32", DT_F32},   {"float32", DT_F32},   {"f16", DT_F16}, {"float16", DT_F16},
        {"bf16", DT_BF16}, {"bfloat16", DT_BF16}, {"int8", DT_I8}, {"i8", DT_I8},
        {"q8", DT_Q8},     {"q8_0", DT_Q8},       {"q4", DT_Q4},   {"q4_0", DT_Q4},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(s, names[i].name)) {
            *out = names[i].t;
            return 0;
        }
    return -1;
}

/* Conversions go run by run: a large array in parallel, a short one (a cache row of head_dim,
 * called inside the kernels' own parallel loops) directly, without entering an OpenMP construct at
 * all. f16 runs use the CPU's conversion instructions where it has them (F16C: exact one way, round
 * to nearest even the other, as the scalar functions), eight at a time; a NaN takes the scalar
 * path, which writes the canonical quiet NaN. */
enum { RUN = 1024 };
typedef void (*run_fn)(void *dst, const void *src, size_t n);

static void runs(run_fn f, void *dst, size_t dst_elem, const void *src, size_t src_elem, size_t n)
{
    if (n <= RUN) {
        f(dst, src, n);
        return;
    }
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
    for (size_t i = 0; i < n; i += RUN)
        f((char *)dst + i * dst_elem, (const char *)src + i * src_elem, n - i < RUN ? n - i : RUN);
}

/* the i-th 16-bit value of src, which may lie at any address (a tensor in place in a file whose
 * header length is odd) */
static inline uint16_t load16(const void *src, size_t i)
{
    uint16_t v;
    memcpy(&v, (const char *)src + 2 * i, 2);
    return v;
}

static void f16_to_f32(void *dst, const void *src, size_t n)
{
    float *d = dst;
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        const void *at = (const char *)src + 2 * i;
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(at)));
    }
#endif
    for (; i < n; i++)
        d[i] = dt_f16_to_f32(load16(src, i));
}

static void f32_to_f16(void *dst, const void *src, size_t n)
{
    uint16_t *h = dst;
    const float *s = src;
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(s + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++)
                h[i + k] = dt_f32_to_f16(s[i + k]);
        else
            _mm_storeu_si128((__m128i *)(h + i),
                             _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    for (; i < n; i++)
        h[i] = dt_f32_to_f16(s[i]);
}

static void bf16_to_f32(void *dst, const void *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ((float *)dst)[i] = dt_bf16_to_f32(load16(src, i));
}

static void f32_to_bf16(void *dst, const void *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ((uint16_t *)dst)[i] = dt_f32_to_bf16(((const float *)src)[i]);
}

/* whether k values of es bytes (2 or 4, a constant where it is inlined) from b hold an exponent of
 * all ones; the loads are unaligned and fixed in size, so the loop is vectorised */
static inline __attribute__((always_inline)) int any_nonfinite(const unsigned char *b, size_t k,
                                                               size_t es, uint32_t mask)
{
    int any = 0;
#pragma omp simd reduction(| : any)
    for (size_t i = 0; i < k; i++) {
        uint32_t v;
        if (es == 4) {
            memcpy(&v, b + i * 4, 4);
        } else {
            uint16_t h;
            memcpy(&h, b + i * 2, 2);
            v = h;
        }
        any |= (v & mask) == mask;
    }
    return any;
}

size_t dt_first_nonfinite(const void *p, dtype t, size_t n)
{
    /* a run of RUN values tested without a branch, then looked into where one is not finite */
    size_t es = dt_elem(t);
    uint32_t mask = t == DT_F32 ? 0x7f800000u : t == DT_F16 ? 0x7c00u : 0x7f80u;
    const unsigned char *b = p;
    for (size_t i0 = 0; i0 < n; i0 += RUN) {
        size_t k = n - i0 < RUN ? n - i0 : RUN;
        const unsigned char *r = b + i0 * es;
        if (es == 4 ? !any_nonfinite(r, k, 4, mask) : !any_nonfinite(r, k, 2, mask))
            continue;
        for (size_t i = 0; i < k; i++)
            if (any_nonfinite(r + i * es, 1, es, mask))
                return i0 + i;
    }
    return n;
}

void dt_to_f32(float *dst, const void *src, dtype t, size_t n)
{
    switch (t) {
        case DT_F32: memcpy(dst, src, n * 4); break;
        case DT_BF16: runs(bf16_to_f32, dst, 4, src, 2, n); break;
        case DT_F16: runs(f16_to_f32, dst, 4, src, 2, n); break;
        case DT_I8:
        case DT_Q8:
            for (size_t i = 0; i < n; i++)
                dst[i] = ((const int8_t *)src)[i];
            break;
        case DT_Q4: /* blocks of bits, not elements: dt_q4_quantize, dt_q6_quantize */
        case DT_Q6: break;
    }
}

void dt_from_f32(void *dst, const float *src, dtype t, size_t n)
{
    switch (t) {
        case DT_F32: memcpy(dst, src, n * 4); break;
        case DT_BF16: runs(f32_to_bf16, dst, 2, src, 4, n); break;
        case DT_F16: runs(f32_to_f16, dst, 2, src, 4, n); break;
        case DT_Q4:
        case DT_Q6: break;
        case DT_I8:
        case DT_Q8:
            for (size_t i = 0; i < n; i++)
                ((int8_t *)dst)[i] = (int8_t)(src[i] > 127    ? 127
                                              : src[i] < -127 ? -127
                                                              : __builtin_rintf(src[i]));
            break;
    }
}

/* roundf(v) (halves away from zero, as q8_0 rounds) for |v| <= 127 in a form GCC vectorises:
 * libm's roundf stays a call, truncf vectorises only without trapping math, and a choice between
 * t + 1, t - 1 and t stayed a scalar loop of branches (6% of a one-thread q8 decode step). The
 * conversion truncates exactly, and v - t is exact. */
static inline int32_t round_away(float v)
{
    int32_t t = (int32_t)v;
    float f = v - (float)t;
    return t + (f >= 0.5f) - (f <= -0.5f);
}

void dt_q8_quantize(int8_t *q, uint16_t *scale, float *scale_f32, const float *x, size_t n)
{
    for (size_t b = 0; b < n / DT_Q8_BLOCK; b++) {
        const float *xb = x + b * DT_Q8_BLOCK;
        float amax = 0;
#pragma omp simd reduction(max : amax)
        for (int i = 0; i < DT_Q8_BLOCK; i++)
            amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
#pragma omp simd
        for (int i = 0; i < DT_Q8_BLOCK; i++)
            q[b * DT_Q8_BLOCK + i] = (int8_t)round_away(xb[i] * inv);
        if (scale)
            scale[b] = dt_f32_to_f16(d);
        if (scale_f32)
            scale_f32[b] = d;
    }
}

void dt_q4_quantize(uint8_t *q, uint16_t *scale, const float *x, size_t n)
{
    for (size_t b = 0; b < n / DT_Q4_BLOCK; b++) {
        uint16_t d;
        dt_q4_block(q + b * DT_Q4_BLOCK / 2, &d, x + b * DT_Q4_BLOCK);
        if (scale)
            scale[b] = d;
    }
}

void dt_q6_quantize(uint8_t *q, uint16_t *scale, const float *x, size_t n)
{
    for (size_t b = 0; b < n / DT_Q6_BLOCK; b++) {
        const float *xb = x + b * DT_Q6_BLOCK;
        uint8_t *o = q + b * DT_Q6_BLOCK_BYTES;
        float amax = 0, m = 0;
        for (int i = 0; i < DT_Q6_BLOCK; i++)
            if (fabsf(xb[i]) > amax) {
                amax = fabsf(xb[i]);
                m = xb[i];
            }
        float d = m / -32, inv = d != 0 ? 1.0f / d : 0.0f;
        memset(o, 0, DT_Q6_BLOCK_BYTES);
        for (int i = 0; i < DT_Q6_BLOCK; i++) {
            int v = (int)(xb[i] * inv + 32.5f);
            v = v < 63 ? v : 63;
            int bit = 6 * i; /* dt_q6_value's place: one byte, or the low bits of the next */
            o[bit / 8] |= (uint8_t)(v << bit % 8);
            if (bit % 8 > 2)
                o[bit / 8 + 1] |= (uint8_t)(v >> (8 - bit % 8));
        }
        if (scale)
            scale[b] = dt_f32_to_f16(d);
    }
}

void dt_q4_dequantize(float *x, const uint8_t *q, const uint16_t *scale, size_t n)
{
    enum { HALF = DT_Q4_BLOCK / 2 };
    for (size_t b = 0; b < n / DT_Q4_BLOCK; b++) {
        float d = dt_f16_to_f32(scale[b]), *o = x + b * DT_Q4_BLOCK;
        const uint8_t *v = q + b * HALF;
#ifdef __AVX512F__ /* a q4 cache's rows are widened for every decode step: 16 values at a time */
        __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)v)),
                m = _mm512_set1_epi32(15), e = _mm512_set1_epi32(8);
        __m512 dv = _mm512_set1_ps(d);
        _mm512_storeu_ps(
            o, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(u, m), e)), dv));
        _mm512_storeu_ps(
            o + HALF,
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(u, 4), e)), dv));
#else
        for (int j = 0; j < HALF; j++) {
            o[j] = (float)((v[j] & 15) - 8) * d;
            o[j + HALF] = (float)((v[j] >> 4) - 8) * d;
        }
#endif
    }
}
