/* __half of the emulated device: IEEE binary16 in an unsigned short, converted as CUDA rounds. */
#ifndef CUEMU_CUDA_FP16_H
#define CUEMU_CUDA_FP16_H

#include "cuemu_device.h"

namespace cuemu
{
/* float to binary16, round to nearest even; NaN becomes CUDA's canonical 0x7fff */
static inline unsigned short f32_to_f16(float f)
{
    uint32_t x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return 0x7fff;
    if (ax >= 0x47800000u) /* 2^16 and above, and infinity */
        return (unsigned short)(sign | 0x7c00u);
    int e = (int)(ax >> 23) - 127;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    if (e >= -14) { /* normal: 10 of the 23 mantissa bits kept (a carry may reach infinity) */
        uint32_t h = ((uint32_t)(e + 15) << 10) | ((m >> 13) & 0x3ffu), rem = m & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (unsigned short)(sign | h);
    }
    if (e < -25 || ax == 0)
        return (unsigned short)sign;
    int shift = -(e + 1); /* subnormal: units of 2^-24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (unsigned short)(sign | q);
}

static inline float f16_to_f32(unsigned short h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
    if (e == 31)
        return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}
} /* namespace cuemu */

struct __half_raw {
    unsigned short x;
};
struct __half {
    unsigned short __x;
    __half() = default;
    __half(__half_raw r) : __x(r.x) {}
    __half(float f) : __x(::cuemu::f32_to_f16(f)) {}
    __half(double f) : __x(::cuemu::f32_to_f16((float)f)) {}
    operator float() const { return ::cuemu::f16_to_f32(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
};
struct __half2 {
    __half x, y;
};
typedef __half half;
typedef __half2 half2;

static inline __half __ushort_as_half(unsigned short v) { return __half(__half_raw{v}); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return ::cuemu::f16_to_f32(h.__x); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
static inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
static inline float2 __half22float2(__half2 h)
{
    return make_float2(__half2float(h.x), __half2float(h.y));
}
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }

#endif
