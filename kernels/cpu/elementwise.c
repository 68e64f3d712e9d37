#include "cpu.h"
#include "vecmath.h"

int cpu_gelu(kb_backend *b, float *x, size_t n)
{
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
#pragma omp parallel for simd num_threads(b->threads) if (n > 16384)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + vm_tanhf(k * (v + 0.044715f * v * v * v)));
    }
    return 0;
}
