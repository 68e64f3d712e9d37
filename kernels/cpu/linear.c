/* The fused products (backend.h's linear and linear_t) as the reference kernels in sequence, a
 * token at a time: layernorm, product, residual add, each the same arithmetic as the unfused
 * forward pass. */
#include "cpu.h"

/* x, or its normalised copy in staging[0..K) */
static const float *input(kb_backend *b, const float *x, int K, const kb_norm *norm, float *staging)
{
    if (!norm)
        return x;
    return cpu_layernorm(b, staging, x, norm->g, norm->b, 1, K, norm->eps) ? NULL : staging;
}

int cpu_linear(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
               const kb_norm *norm, kb_act act, int residual)
{
    int K = w->rows, N = w->cols;
    float *staging = cpu_staging(b, (size_t)K + (size_t)N);
    for (int t = 0; t < n; t++) {
        float *yt = y + (size_t)t * N, *out = residual ? staging + K : yt;
        const float *in = staging ? input(b, x + (size_t)t * K, K, norm, staging) : NULL;
        if (!in || cpu_matmul(b, out, in, 1, w, bias, act))
            return -1;
        for (int j = 0; residual && j < N; j++)
            yt[j] += out[j];
    }
    return 0;
}

int cpu_linear_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                 const kb_norm *norm)
{
    float *staging = cpu_staging(b, (size_t)w->cols);
    for (int t = 0; t < n; t++) {
        const float *in =
            staging ? input(b, x + (size_t)t * w->cols, w->cols, norm, staging) : NULL;
        if (!in || cpu_matmul_t(b, y + (size_t)t * w->rows, in, 1, w))
            return -1;
    }
    return 0;
}
