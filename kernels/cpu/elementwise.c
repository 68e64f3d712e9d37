#include "cpu.h"
#include "vecmath.h"

int cpu_gelu(kb_backend *b, float *x, size_t n)
{
#pragma omp parallel for simd num_threads(b->threads) if (n > 16384)
    for (size_t i = 0; i < n; i++)
        x[i] = vm_gelu(x[i]);
    return 0;
}
