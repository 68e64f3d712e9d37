/* Shared by the CUDA kernels: error checks that carry the call and its error string up to err.h, the
 * backend's state, and the kernels' entry points. Every CUDA and cuBLAS call goes through CK/CB. */
#ifndef KVCHAT_CUDA_COMMON_CUH
#define KVCHAT_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../err.h"
#include "../kvlayout.h"
#include "cuda.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return err_set("%s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__);   \
    } while (0)
#define CB(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return err_set("%s: %s (%s:%d)", #call, cublasGetStatusString(s_), __FILE__, __LINE__); \
    } while (0)
/* after a launch: configuration errors now, execution errors at the next synchronising call */
#define CK_LAUNCH() CK(cudaGetLastError())

struct cuda_state {
    cublasHandle_t blas;
    void *scratch;          /* grows: 16-bit activations, token ids, block tables */
    size_t scratch_bytes;
    cudaDeviceProp prop;
};

static inline cuda_state *cuda_of(kb_backend *b) { return (cuda_state *)b->ctx; }
int cuda_scratch(kb_backend *b, size_t bytes, void **out);

int cuda_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias);
int cuda_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w);
int cuda_embed(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte, const kb_mat *wpe);
int cuda_layernorm(kb_backend *b, float *y, const float *x, const float *g, const float *beta, int n, int C, float eps);
int cuda_add(kb_backend *b, float *x, const float *y, size_t n);
int cuda_gelu(kb_backend *b, float *x, size_t n);
int cuda_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past, int n);
/* y[i, :] = bias for n rows of N; to_16bit: f32 -> f16 or bf16 */
int cuda_fill_rows(float *y, const float *bias, int n, int N);
int cuda_to_16bit(void *dst, const float *src, dtype t, size_t n);

/* element loads of any storage dtype, widened to float */
__device__ __forceinline__ float cu_load(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return ((const float *)p)[i];
    unsigned short h = ((const unsigned short *)p)[i];
    if (t == DT_BF16)
        return __uint_as_float((unsigned)h << 16);
    if (t == DT_I8)
        return (float)((const signed char *)p)[i];
    return __half2float(__ushort_as_half(h));
}

#endif
