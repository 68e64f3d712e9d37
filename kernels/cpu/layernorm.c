#include <math.h>

#include "cpu.h"

int cpu_layernorm(kb_backend *b, float *y, const float *x, const float *g, const float *beta, int n, int C, float eps)
{
#pragma omp parallel for num_threads(b->threads) if (n > 4)
    for (int i = 0; i < n; i++) {
        const float *xr = x + (size_t)i * C;
        float *yr = y + (size_t)i * C;
        float mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += xr[c];
        mean /= (float)C;
        for (int c = 0; c < C; c++)
            var += (xr[c] - mean) * (xr[c] - mean);
        float rstd = 1.0f / sqrtf(var / (float)C + eps);
        for (int c = 0; c < C; c++)
            yr[c] = (xr[c] - mean) * rstd * g[c] + beta[c];
    }
    return 0;
}
