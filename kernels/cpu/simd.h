/* Vector helpers shared by the CPU kernels: load VW elements of any storage dtype as floats.
 * AVX-512 or AVX2+FMA+F16C when the build targets them (-march), plain C otherwise.
 * vld_bf16_split widens 2 * VW bf16 values with one load, a shift and a mask, as two vectors: the
 * even-indexed values and the odd-indexed ones (widening them in order takes a shuffle per VW
 * values, which bounded a one-thread bf16 decode); vstore_merged puts such a pair back in order. */
#ifndef KVCHAT_SIMD_H
#define KVCHAT_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#include "../dtype.h"

#define INLINE static inline __attribute__((always_inline))

/* an f16 scale's value: F16C's conversion where the build has it */
INLINE float simd_half(uint16_t h)
{
#ifdef __F16C__
    return _cvtsh_ss(h);
#else
    return dt_f16_to_f32(h);
#endif
}

#ifdef __AVX__
/* the sum of v's 8 lanes: the halves, then lanes 0 + 2 and 1 + 3, then those two */
INLINE float vsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif

#ifdef __AVX2__
/* vsum8 of v[0..3] at once, the same additions in the same order: [sum v0, sum v1, sum v2, sum v3]
 * (a sum's two operands swap places, which changes no bit) */
INLINE __m128 vsum8x4(const __m256 v[4])
{
    __m256 h01 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[1], 0x20),
                               _mm256_permute2f128_ps(v[0], v[1], 0x31)),
           h23 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[3], 0x20),
                               _mm256_permute2f128_ps(v[2], v[3], 0x31));
    /* per 128-bit lane: [v0's 0 + 2, 1 + 3, v2's 0 + 2, 1 + 3 | v1's ..., v3's ...] */
    __m256 p = _mm256_add_ps(_mm256_shuffle_ps(h01, h23, 0x44), _mm256_shuffle_ps(h01, h23, 0xee));
    __m256 r = _mm256_hadd_ps(p, p); /* [v0, v2, v0, v2 | v1, v3, v1, v3] */
    return _mm256_castps256_ps128(
        _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
}
#endif

/* element i of an array of type t, widened (DT_I8 without its scale) */
INLINE float ld1(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return ((const float *)p)[i];
    if (t == DT_BF16)
        return dt_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == DT_I8)
        return ((const int8_t *)p)[i];
    return dt_f16_to_f32(((const uint16_t *)p)[i]);
}

#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
INLINE vf vld(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return _mm512_loadu_ps((const float *)p + i);
    if (t == DT_I8)
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)p + i))));
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    if (t == DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}
#define VLOADF(p) _mm512_loadu_ps(p)
#define VSTOREF(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VZERO() _mm512_setzero_ps()
#define VSUM(v) vsum16(v)
/* the sum of v's lanes by a fixed tree (GCC's _mm512_reduce_add_ps): the upper half plus the
 * lower, the same for quarters, then lanes 0 + 2 and 1 + 3, then those two; vsum16_x16 adds the
 * same way */
INLINE float vsum16(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)),
                             _mm512_castps512_ps256(v));
    __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    q = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

/* s[r] = vsum16(v[r]) for 16 vectors, each addition of the tree made for several vectors at once
 * (four 128-bit quarters of two vectors side by side, then of four, ...) */
INLINE __m512 vsum16_x16(const __m512 *v)
{
    __m512 h[8], q[4], p[2];
    for (int i = 0; i < 8; i++) /* upper halves (quarters 2, 3) + lower (0, 1), two vectors */
        h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44));
    for (int i = 0; i < 4; i++) /* then quarter 1 + quarter 0: vector 4i + j in quarter j */
        q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xdd),
                             _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88));
    for (int i = 0; i < 2; i++) /* lanes 0 + 2, 1 + 3: quarter j holds 8i + j, then 8i + 4 + j */
        p[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0xee));
    /* the two: quarter j holds vectors j, 4 + j, 8 + j, 12 + j; put back in order */
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(order, s);
}

INLINE void vld_bf16_split(const uint16_t *p, vf *even, vf *odd)
{
    __m512i v = _mm512_loadu_si512((const void *)p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}
INLINE void vstore_merged(float *dst, vf even, vf odd)
{
    /* lane i takes even[i / 2] or odd[i / 2] (index 16 + i / 2), from the low half and the high */
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    _mm512_storeu_ps(dst, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(even, hi, odd));
}
/* vstore_merged's inverse: 2 * VW floats as their even-indexed values and their odd ones */
INLINE void vld_split(const float *p, vf *even, vf *odd)
{
    const __m512i e = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
    *even = _mm512_permutex2var_ps(a, e, b);
    *odd = _mm512_permutex2var_ps(a, _mm512_add_epi32(e, _mm512_set1_epi32(1)), b);
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VW 8
typedef __m256 vf;
INLINE vf vld(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return _mm256_loadu_ps((const float *)p + i);
    if (t == DT_I8)
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)p + i))));
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (t == DT_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
INLINE void vld_bf16_split(const uint16_t *p, vf *even, vf *odd)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}
INLINE void vstore_merged(float *dst, vf even, vf odd)
{
    __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
INLINE void vld_split(const float *p, vf *even, vf *odd)
{
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    /* per 128-bit lane (a0, a2, b0, b2), then the 64-bit pairs in order */
    *even = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
    *odd = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}
#define VLOADF(p) _mm256_loadu_ps(p)
#define VSTOREF(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VZERO() _mm256_setzero_ps()
#define VSUM(v) vsum8(v)
#endif

#ifdef VW
/* dot_t's vector part: its two accumulators over x[0..n) and w[off..off+n), to the last whole
 * vector (the index returned) */
INLINE int dot_parts(const float *x, const void *w, dtype t, size_t off, int n, vf *a0, vf *a1)
{
    int c = 0;
    *a0 = *a1 = VZERO();
    for (; c + 2 * VW <= n; c += 2 * VW) {
        *a0 = VFMA(VLOADF(x + c), vld(w, off + c, t), *a0);
        *a1 = VFMA(VLOADF(x + c + VW), vld(w, off + c + VW, t), *a1);
    }
    for (; c + VW <= n; c += VW)
        *a0 = VFMA(VLOADF(x + c), vld(w, off + c, t), *a0);
    return c;
}
#endif

/* dot(x[0..n), w[off..off+n)) with w of type t */
INLINE float dot_t(const float *x, const void *w, dtype t, size_t off, int n)
{
    int c = 0;
    float s = 0;
#ifdef VW
    vf a0, a1;
    c = dot_parts(x, w, t, off, n, &a0, &a1);
    s = VSUM(a0) + VSUM(a1);
#endif
    for (; c < n; c++)
        s += x[c] * ld1(w, off + c, t);
    return s;
}

#ifdef VW
/* v's VW vectors' VSUMs as one vector: [VSUM(v[0]), ..., VSUM(v[VW - 1])], the same bits */
INLINE vf vsums(const vf *v)
{
#if VW == 16
    return vsum16_x16(v);
#else
    return _mm256_set_m128(vsum8x4(v + 4), vsum8x4(v));
#endif
}

/* s[r] = dot_t(x, w, t, off + r * n, n) for VW rows of n values (n a multiple of VW) with dot_t's
 * operations, the rows' accumulators summed together: one reduction a row was most of a decode
 * step's attention at a depth of 512, and made the LM head's rows slower than the memory */
INLINE void dot_rows(float *s, const float *x, const void *w, dtype t, size_t off, int n)
{
    vf a0[VW], a1[VW];
    for (int r = 0; r < VW; r++)
        dot_parts(x, w, t, off + (size_t)r * n, n, &a0[r], &a1[r]);
    VSTOREF(s, VADD(vsums(a0), vsums(a1)));
}
#endif

/* y[0..n) += a * w[0..n) with w of type t */
INLINE void axpy_t(float *restrict y, float a, const void *w, dtype t, int n)
{
    int c = 0;
#ifdef VW
    vf av = VSET1(a);
    for (; c + VW <= n; c += VW)
        VSTOREF(y + c, VFMA(vld(w, (size_t)c, t), av, VLOADF(y + c)));
#endif
    for (; c < n; c++)
        y[c] += a * ld1(w, (size_t)c, t);
}

#endif
