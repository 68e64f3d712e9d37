/* __nv_bfloat16 of the emulated device: the top half of a float, converted as CUDA rounds. */
#ifndef CUEMU_CUDA_BF16_H
#define CUEMU_CUDA_BF16_H

#include "cuda_fp16.h"

namespace cuemu
{
/* round to nearest even; NaN becomes CUDA's canonical 0x7fff */
static inline unsigned short f32_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return 0x7fff;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}
} /* namespace cuemu */

struct __nv_bfloat16_raw {
    unsigned short x;
};
struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(::cuemu::f32_to_bf16(f)) {}
    __nv_bfloat16(double f) : __x(::cuemu::f32_to_bf16((float)f)) {}
    operator float() const { return __uint_as_float((uint32_t)__x << 16); }
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v)
{
    return __nv_bfloat16(__nv_bfloat16_raw{v});
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)};
}

#endif
