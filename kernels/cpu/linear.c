/* The fused one-token products (backend.h's linear and linear_t) as the reference kernels in
 * sequence: layernorm, product, residual add, each the same arithmetic as the unfused forward pass.
 */
#include "cpu.h"

/* x, or its normalised copy in staging[0..K) */
static const float *input(kb_backend *b, const float *x, int K, const kb_norm *norm, float *staging)
{
    if (!norm)
        return x;
    return cpu_layernorm(b, staging, x, norm->g, norm->b, 1, K, norm->eps) ? NULL : staging;
}

int cpu_linear(kb_backend *b, float *y, const float *x, const kb_mat *w, const float *bias,
               const kb_norm *norm, kb_act act, int residual)
{
    int K = w->rows, N = w->cols;
    float *staging = cpu_staging(b, (size_t)K + (size_t)N), *out = residual ? staging + K : y;
    const float *in = staging ? input(b, x, K, norm, staging) : NULL;
    if (!in || cpu_matmul(b, out, in, 1, w, bias, act))
        return -1;
    for (int j = 0; residual && j < N; j++)
        y[j] += out[j];
    return 0;
}

int cpu_linear_t(kb_backend *b, float *y, const float *x, const kb_mat *w, const kb_norm *norm)
{
    float *staging = cpu_staging(b, (size_t)w->cols);
    const float *in = staging ? input(b, x, w->cols, norm, staging) : NULL;
    return in ? cpu_matmul_t(b, y, in, 1, w) : -1;
}
