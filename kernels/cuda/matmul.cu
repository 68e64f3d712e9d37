/* Matrix products through cuBLAS, accumulating in f32. f32 weights: SGEMM (no TF32).
 * f16/bf16 weights: the activations are rounded to the weights' type and cublasGemmEx multiplies
 * them with f32 accumulation (the CPU twin keeps f32 activations: agreement is to about 1e-3). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"

__global__ static void fill_rows(float *y, const float *bias, int n, int N)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n * N)
        y[i] = bias[i % N];
}

int cuda_fill_rows(kb_backend *b, float *y, const float *bias, int n, int N)
{
    size_t total = (size_t)n * N;
    fill_rows<<<(unsigned)((total + 255) / 256), 256, 0, cuda_stream(b)>>>(y, bias, n, N);
    CK_LAUNCH();
    return 0;
}

__global__ static void to_16bit(void *dst, const float *src, int bf16, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (bf16)
        ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
    else
        ((__half *)dst)[i] = __float2half_rn(src[i]);
}

int cuda_to_16bit(kb_backend *b, void *dst, const float *src, dtype t, size_t n)
{
    to_16bit<<<(unsigned)((n + 255) / 256), 256, 0, cuda_stream(b)>>>(dst, src, t == DT_BF16, n);
    CK_LAUNCH();
    return 0;
}

static cudaDataType_t cuda_type(dtype t)
{
    return t == DT_F32 ? CUDA_R_32F : t == DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* column-major C[m, n] = op(A) B with A the stored weights; x converted when the weights are 16-bit */
static int gemm(kb_backend *b, cublasOperation_t opA, int m, int n, int k, const kb_mat *w, int lda, const float *x,
                int ldb, float *y, int ldc, float beta)
{
    cuda_state *s = cuda_of(b);
    const float one = 1.0f;
    if (w->type == DT_F32) {
        CB(cublasSgemm(s->blas, opA, CUBLAS_OP_N, m, n, k, &one, (const float *)w->data, lda, x, ldb, &beta, y, ldc));
        return 0;
    }
    void *x16;
    if (cuda_scratch(b, (size_t)k * n * 2, &x16) || cuda_to_16bit(b, x16, x, w->type, (size_t)k * n))
        return -1;
    CB(cublasGemmEx(s->blas, opA, CUBLAS_OP_N, m, n, k, &one, w->data, cuda_type(w->type), lda, x16, cuda_type(w->type), ldb,
                    &beta, y, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

int cuda_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias)
{
    /* row-major y[n, N] = x[n, K] W[K, N] is column-major y^T[N, n] = W^T[N, K] x^T[K, n], and the
     * row-major W is already a column-major [N, K] */
    int K = w->rows, N = w->cols;
    if (bias && cuda_fill_rows(b, y, bias, n, N))
        return -1;
    return gemm(b, CUBLAS_OP_N, N, n, K, w, N, x, K, y, N, bias ? 1.0f : 0.0f);
}

int cuda_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w)
{
    /* y[n, V] = x[n, C] W^T with W [V, C]: column-major y^T[V, n] = (stored [C, V])^T x^T[C, n] */
    int V = w->rows, C = w->cols;
    return gemm(b, CUBLAS_OP_T, V, n, C, w, C, x, C, y, V, 0.0f);
}
