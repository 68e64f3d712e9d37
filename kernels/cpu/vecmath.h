/* Branch-free float exp that GCC vectorises (libm's expf and tanhf stay scalar and would dominate
 * the GELU and softmax of a long prefill). Cephes' polynomial: about 1 ulp on the clamped range. */
#ifndef KVCHAT_VECMATH_H
#define KVCHAT_VECMATH_H

#include <stdint.h>
#include <string.h>

static inline float vm_expf(float x)
{
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.3365447505531f ? -87.3365447505531f : x;
    /* round to nearest by the 1.5 * 2^23 trick: roundf() is a libm call and blocks vectorisation */
    float n = (x * 1.44269504088896341f + 0x1.8p23f) - 0x1.8p23f;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* NaN stays NaN (p is NaN); its cast to int would be undefined, so it takes 0 */
    uint32_t bits = (uint32_t)((n == n ? (int32_t)n : 0) + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

/* tanh through exp of a non-positive argument, so nothing overflows. */
static inline float vm_tanhf(float x)
{
    float a = x < 0 ? -x : x;
    float e = vm_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return x < 0 ? -t : t;
}

/* the tanh form of GELU (GPT-2's): cpu_gelu and the products that apply it as they finish */
static inline float vm_gelu(float v)
{
    return 0.5f * v *
           (1.0f + vm_tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))); /* sqrt(2 / pi) */
}

/* y[t][j0, j1) = GELU of itself for n rows of N: a thread's run of columns after its products, in
 * vectors (a row at a time, the GELU was a fifth of a decode step's product) */
static inline void vm_gelu_columns(float *y, int n, int N, int j0, int j1)
{
    for (int t = 0; t < n; t++) {
        float *yt = y + (size_t)t * N;
#pragma omp simd
        for (int i = j0; i < j1; i++)
            yt[i] = vm_gelu(yt[i]);
    }
}

#endif
