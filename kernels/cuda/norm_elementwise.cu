/* Embeddings, layernorm (alone or fused with the residual add) and GELU: the CPU twins are embed.c,
 * layernorm.c and elementwise.c. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"

/* ids and the first position come from the step's scalars in device memory; q8 and q6 token rows
 * carry an f16 scale per block of 32 */
__global__ static void embed_k(float *x, const cu_step *st, const void *wte, dtype tt,
                               const uint16_t *scales, const void *wpe, dtype pt, int C)
{
    int i = blockIdx.x;
    size_t te = (size_t)cu_ids(st)[i] * C, pe = (size_t)(st->pos + i) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float t = tt == DT_Q6 ? (float)dt_q6_value((const unsigned char *)wte +
                                                       (te + c) / DT_Q6_BLOCK * DT_Q6_BLOCK_BYTES,
                                                   (int)((te + c) % DT_Q6_BLOCK))
                              : cu_load(wte, te + c, tt);
        if (tt == DT_Q8 || tt == DT_Q6)
            t *= __half2float(__ushort_as_half(scales[(te + c) / DT_Q8_BLOCK]));
        x[(size_t)i * C + c] = t + cu_load(wpe, pe + c, pt);
    }
}

int cuda_embed(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte,
               const kb_mat *wpe)
{
    const cu_step *st;
    if (cuda_step_args(b, ids, n, pos0, NULL, &st))
        return -1;
    cuda_rounded_forget(b, x);
    embed_k<<<n, 256, 0, cuda_stream(b)>>>(x, st, wte->data, wte->type, wte->scales, wpe->data,
                                           wpe->type, wte->cols);
    CK_LAUNCH();
    return 0;
}

/* one row per block; with r, x += r first (the residual add), and y may be r; y's 16-bit roundings
 * for the GEMM that reads it go to yr16 */
__global__ static void layernorm_k(float *y, cu_rounded yr16, float *x, const float *r,
                                   const float *g, const float *beta, int C, float eps)
{
    __shared__ float red[32];
    float *xr = x + (size_t)blockIdx.x * C;
    float s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (r)
            xr[c] += r[(size_t)blockIdx.x * C + c];
        s += xr[c];
    }
    float mean = cu_block_sum(s, red) / C, v = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        v += (xr[c] - mean) * (xr[c] - mean);
    float rstd = rsqrtf(cu_block_sum(v, red) / C + eps);
    size_t row = (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        cu_put(y, yr16, row + c, (xr[c] - mean) * rstd * g[c] + beta[c]);
    }
}

int cuda_add_layernorm(kb_backend *b, float *y, float *x, const float *r, const float *g,
                       const float *beta, int n, int C, float eps)
{
    cu_rounded y16;
    if (r)
        cuda_rounded_forget(b, x);
    if (cuda_rounded_out(b, y, (size_t)n * C, &y16))
        return -1;
    layernorm_k<<<n, 256, 0, cuda_stream(b)>>>(y, y16, x, r, g, beta, C, eps);
    CK_LAUNCH();
    return 0;
}

int cuda_layernorm(kb_backend *b, float *y, const float *x, const float *g, const float *beta,
                   int n, int C, float eps)
{
    return cuda_add_layernorm(b, y, (float *)x, NULL, g, beta, n, C,
                              eps); /* x is only read without r */
}

__global__ static void gelu_k(float *x, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = cu_gelu(x[i]);
    }
}

int cuda_gelu(kb_backend *b, float *x, size_t n)
{
    cuda_rounded_forget(b, x);
    gelu_k<<<(unsigned)((n + 255) / 256), 256, 0, cuda_stream(b)>>>(x, n);
    CK_LAUNCH();
    return 0;
}
