/* The CUDA backend object: device memory, one cuBLAS handle, a growing scratch buffer. Work runs on
 * the legacy default stream, so every copy is ordered after the kernels before it. */
#include <cuda_fp16.h>
#include <stdlib.h>

#include "common.cuh"

int cuda_scratch(kb_backend *b, size_t bytes, void **out)
{
    cuda_state *s = cuda_of(b);
    if (bytes > s->scratch_bytes) {
        if (s->scratch)
            CK(cudaFree(s->scratch));
        s->scratch = NULL;
        s->scratch_bytes = 0;
        CK(cudaMalloc(&s->scratch, bytes));
        s->scratch_bytes = bytes;
    }
    *out = s->scratch;
    return 0;
}

static void *cu_alloc(kb_backend *b, size_t bytes, const char *what)
{
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        err_set("out of GPU memory allocating %zu bytes for %s (%zu of %zu bytes free): %s", bytes, what, free_b, total,
                cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cu_release(kb_backend *b, void *p)
{
    (void)b;
    if (p)
        cudaFree(p);
}

static int cu_copy(kb_backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault)); /* unified addressing tells host from device */
    return 0;
}

static int cu_mem_info(kb_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    (void)b;
    CK(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

static void cu_destroy(kb_backend *b)
{
    if (!b)
        return;
    cuda_state *s = cuda_of(b);
    if (s->scratch)
        cudaFree(s->scratch);
    if (s->blas)
        cublasDestroy(s->blas);
    free(s);
    free(b);
}

static int init(cuda_state *s)
{
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 1)
        return err_set("no CUDA device found");
    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&s->prop, 0));
    CB(cublasCreate(&s->blas));
    /* the default math keeps FP32 GEMMs in FP32 (TF32 only when asked for), so f32 weights match the
     * CPU reference, and lets 16-bit GEMMs use the tensor cores */
    CB(cublasSetMathMode(s->blas, CUBLAS_DEFAULT_MATH));
    return 0;
}

extern "C" kb_backend *cuda_backend_create(void)
{
    kb_backend *b = (kb_backend *)calloc(1, sizeof *b);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        err_set("out of memory");
        return NULL;
    }
    b->ctx = s;
    if (init(s)) {
        cu_destroy(b);
        return NULL;
    }
    b->name = "cuda";
    b->threads = 1;
    b->device_memory = 1;
    b->alloc = cu_alloc;
    b->release = cu_release;
    b->copy = cu_copy;
    b->mem_info = cu_mem_info;
    b->matmul = cuda_matmul;
    b->matmul_t = cuda_matmul_t;
    b->embed = cuda_embed;
    b->layernorm = cuda_layernorm;
    b->add = cuda_add;
    b->gelu = cuda_gelu;
    b->attention = cuda_attention;
    b->destroy = cu_destroy;
    return b;
}
