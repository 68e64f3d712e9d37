#include <math.h>

#include "cpu.h"

/* y = layernorm(x) * g + beta per row, after x += r when r is given (the fused residual add) */
static int norm_rows(kb_backend *b, float *y, float *x, const float *r, const float *g,
                     const float *beta, int n, int C, float eps)
{
#pragma omp parallel for num_threads(b->threads) if (n > 4)
    for (int i = 0; i < n; i++) {
        float *xr = x + (size_t)i * C;
        float *yr = y + (size_t)i * C;
        if (r)
            for (int c = 0; c < C; c++)
                xr[c] += r[(size_t)i * C + c];
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

int cpu_layernorm(kb_backend *b, float *y, const float *x, const float *g, const float *beta, int n,
                  int C, float eps)
{
    return norm_rows(b, y, (float *)x, NULL, g, beta, n, C,
                     eps); /* x is only read when r is NULL */
}

int cpu_add_layernorm(kb_backend *b, float *y, float *x, const float *r, const float *g,
                      const float *beta, int n, int C, float eps)
{
    return norm_rows(b, y, x, r, g, beta, n, C, eps);
}
