/* Element types of weights and caches, and exact conversions between them (round to nearest even).
 */
#ifndef KVCHAT_DTYPE_H
#define KVCHAT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DT_I8 is for KV caches only: int8 values with a float scale kept beside them. DT_Q8 is for
 * weights only: int8 values in blocks of DT_Q8_BLOCK along the reduction, an f16 scale per block
 * kept beside them (the shape of llama.cpp's q8_0); see kb_mat for the layout. DT_Q4 is the same
 * with 4-bit values (llama.cpp's q4_0): a block's 32 values in 16 bytes, byte j holding value j in
 * its low nibble and value j + 16 in its high one, each nibble q standing for (q - 8) * d. DT_Q6 is
 * the tied token embedding and LM head of a q4 model only (llama.cpp keeps a q4_0 file's output
 * in its 6-bit q6_K): blocks of 32 in 24 bytes, an f16 scale each kept beside them, each value 6
 * bits q standing for (q - 32) * d, value i in bits 6i to 6i + 5 of the block read as one
 * little-endian number (dt_q6_value): 8 values to 6 bytes, which AVX-512 VBMI spreads and shifts
 * in two instructions. */
typedef enum { DT_F32, DT_F16, DT_BF16, DT_I8, DT_Q8, DT_Q4, DT_Q6 } dtype;
enum { DT_Q8_BLOCK = 32, DT_Q4_BLOCK = 32, DT_Q6_BLOCK = 32, DT_Q6_BLOCK_BYTES = 24 };

#ifdef __CUDACC__
#define DT_FN __host__ __device__ static inline
#else
#define DT_FN static inline
#endif

/* bytes per element (also in device code); 0 for DT_Q4 and DT_Q6, whose values share bytes:
 * dt_bytes */
DT_FN size_t dt_elem(dtype t)
{
    return t == DT_F32 ? 4 : t == DT_I8 || t == DT_Q8 ? 1 : t == DT_Q4 || t == DT_Q6 ? 0 : 2;
}
size_t dt_size(dtype t);
/* bytes of n values' data (without the block types' scales, kept apart: dt_scale_bytes) */
DT_FN size_t dt_bytes(dtype t, size_t n)
{
    return t == DT_Q4 ? n / 2 : t == DT_Q6 ? n / 32 * DT_Q6_BLOCK_BYTES : n * dt_elem(t);
}
/* bytes of the f16 scales of n values of a block type (0 for the others) */
DT_FN size_t dt_scale_bytes(dtype t, size_t n)
{
    return t == DT_Q8 || t == DT_Q4 || t == DT_Q6 ? n / DT_Q8_BLOCK * 2 : 0;
}
const char *dt_name(dtype t);            /* "f32", "f16", "bf16", "int8", "q8", "q4", "q6" */
int dt_parse(const char *s, dtype *out); /* f32/f16/bf16 (and int8, q8, q4), any case; -1 if not */
/* n values (a multiple of DT_Q8_BLOCK) to int8 blocks: per block d = max|x| / 127, q = round(x /
 * d); d goes to scale[] as f16 (weights) or to scale_f32[] (activations); the other may be NULL */
void dt_q8_quantize(int8_t *q, uint16_t *scale, float *scale_f32, const float *x, size_t n);
/* n values (a multiple of DT_Q4_BLOCK) to q4_0 blocks as llama.cpp's quantize_row_q4_0_ref makes
 * them: m the block's value of largest magnitude, d = m / -8, q = min(15, (int)(x / d + 8.5));
 * n / 2 bytes to q, the f16 scales to scale */
void dt_q4_quantize(uint8_t *q, uint16_t *scale, const float *x, size_t n);
/* and back: n values (q - 8) * d */
void dt_q4_dequantize(float *x, const uint8_t *q, const uint16_t *scale, size_t n);
/* n values (a multiple of DT_Q6_BLOCK) to DT_Q6 blocks in q4_0's way: m the block's value of
 * largest magnitude, d = m / -32, q = min(63, (int)(x / d + 32.5)); n / 32 * 24 bytes to q */
void dt_q6_quantize(uint8_t *q, uint16_t *scale, const float *x, size_t n);
/* value i (0..31) of a DT_Q6 block's 24 bytes: q - 32 (-32..31); times the block's scale it is the
 * value the block stands for */
DT_FN int dt_q6_value(const uint8_t *blk, int i)
{
    int bit = 6 * i, at = bit / 8, sh = bit % 8; /* sh 0, 6, 4, 2: in one byte or two */
    unsigned v = sh <= 2 ? blk[at] : blk[at] | (unsigned)blk[at + 1] << 8;
    return (int)(v >> sh & 63) - 32;
}
/* Whole-array conversions, multithreaded for large arrays (DT_I8 as plain integers, scale 1).
 * dt_to_f32's src may lie at any address: a 16-bit tensor read in place from a file. */
void dt_to_f32(float *dst, const void *src, dtype t, size_t n);
/* The index of the first inf or NaN among n values of type t (f32, f16, bf16; unaligned allowed),
 * or n when all are finite: the exponent bits alone, so it runs at the memory's pace. */
size_t dt_first_nonfinite(const void *p, dtype t, size_t n);
void dt_from_f32(void *dst, const float *src, dtype t, size_t n);

static inline float dt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t dt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float dt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            exp = 113;
            while (!(man & 0x400u)) {
                man <<= 1;
                exp--;
            }
            u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

DT_FN uint16_t dt_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) /* rounds to at least 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below the smallest normal: subnormal or zero */
        if (a < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
    r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | r);
}

/* One q4_0 block of DT_Q4_BLOCK values (dt_q4_quantize's): the CPU and the GPU make the same bytes.
 * x * inv + 8.5 is rounded twice, as llama.cpp's C computes it (no fused multiply-add). */
DT_FN void dt_q4_block(uint8_t *q, uint16_t *scale, const float *x)
{
    float amax = 0, m = 0;
    for (int i = 0; i < DT_Q4_BLOCK; i++)
        if ((x[i] < 0 ? -x[i] : x[i]) > amax) {
            amax = x[i] < 0 ? -x[i] : x[i];
            m = x[i];
        }
    float d = m / -8, inv = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < DT_Q4_BLOCK / 2; j++) {
#ifdef __CUDA_ARCH__
        int lo = (int8_t)__fadd_rn(__fmul_rn(x[j], inv), 8.5f),
            hi = (int8_t)__fadd_rn(__fmul_rn(x[j + DT_Q4_BLOCK / 2], inv), 8.5f);
#else
        int lo = (int8_t)(x[j] * inv + 8.5f), hi = (int8_t)(x[j + DT_Q4_BLOCK / 2] * inv + 8.5f);
#endif
        q[j] = (uint8_t)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
    *scale = dt_f32_to_f16(d);
}

#ifdef __cplusplus
}
#endif

#endif
