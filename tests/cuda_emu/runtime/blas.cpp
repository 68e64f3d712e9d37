/* cuBLAS and cuBLASLt on the emulated device: each product as NVIDIA's documentation defines it,
 * computed on the CPU in double and rounded once (a GPU's summation order and its tensor cores' are
 * among the things only it shows):
 *   D = epilogue(alpha * op(A) op(B) + beta * C), column-major, op(A) m x k, op(B) k x n, each
 * matrix read through its leading dimension; C is not read when beta is 0; f32 compute with 16-bit
 * inputs widens them exactly; TF32 compute (or TF32 math mode for f32) first rounds the inputs to
 * TF32; the BIAS epilogue adds bias[row], GELU applies the tanh form after it. The calls check
 * their arguments as cuBLAS does (status INVALID_VALUE, NOT_SUPPORTED) and queue the product on the
 * handle's stream, so a capture records it with the values given at the call. Every matrix must lie
 * in device memory: one that does not is a fault, as it would be on a GPU. */
#include <stdio.h>
#include <string.h>

#include "../include/cublasLt.h"
#include "../include/cuda_bf16.h"
#include "emu.h"

struct cuemu_blas {
    cudaStream_t stream;
    cublasMath_t math;
};
struct cuemu_lt {
    int unused;
};
struct cuemu_lt_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epi;
    const void *bias;
};
struct cuemu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct cuemu_lt_pref {
    size_t workspace;
};

namespace
{

size_t elem_bytes(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : t == CUDA_R_8I ? 1 : 2;
}

bool is_float(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

double load(const void *p, size_t i, cudaDataType_t t, bool tf32)
{
    if (t == CUDA_R_16F)
        return ((const __half *)p)[i];
    if (t == CUDA_R_16BF)
        return ((const __nv_bfloat16 *)p)[i];
    float v = ((const float *)p)[i];
    if (tf32 &&
        (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u) { /* 10 mantissa bits, nearest even */
        uint32_t u = __float_as_uint(v);
        u += 0xfffu + ((u >> 13) & 1u);
        v = __uint_as_float(u & 0xffffe000u);
    }
    return v;
}

void store(void *p, size_t i, cudaDataType_t t, double v)
{
    if (t == CUDA_R_16F)
        ((__half *)p)[i] = __float2half_rn((float)v);
    else if (t == CUDA_R_16BF)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v);
    else
        ((float *)p)[i] = (float)v;
}

double gelu_tanh(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

struct product {
    cublasOperation_t ta, tb;
    int m, n, k;
    double alpha, beta;
    const void *A, *B, *C;
    void *D;
    cudaDataType_t at, bt, ct, dt;
    int64_t lda, ldb, ldc, ldd;
    bool tf32;
    cublasLtEpilogue_t epi;
    const float *bias;
};

/* the bytes a column-major matrix of rows x cols spans through its leading dimension */
size_t span(int64_t rows, int64_t cols, int64_t ld, cudaDataType_t t)
{
    return rows && cols ? ((size_t)ld * (size_t)(cols - 1) + (size_t)rows) * elem_bytes(t) : 0;
}

/* the rows and columns of A and B as stored (before their op) */
struct shapes {
    int64_t ar, ac, br, bc;
};
shapes shapes_of(const product &p)
{
    return {p.ta == CUBLAS_OP_N ? p.m : p.k, p.ta == CUBLAS_OP_N ? p.k : p.m,
            p.tb == CUBLAS_OP_N ? p.k : p.n, p.tb == CUBLAS_OP_N ? p.n : p.k};
}

/* under CUDA_EMU_UNINIT=report: false, the device's error set, when a product reads bytes never
 * written (its columns through their leading dimensions, C only when beta is not 0) */
bool read_written(const product &p)
{
    shapes d = shapes_of(p);
    struct {
        const void *ptr;
        int64_t rows, cols, ld;
        cudaDataType_t t;
        const char *name;
    } mats[] = {{p.A, d.ar, d.ac, p.lda, p.at, "A"},
                {p.B, d.br, d.bc, p.ldb, p.bt, "B"},
                {p.beta != 0 ? p.C : nullptr, p.m, p.n, p.ldc, p.ct, "C"},
                {p.bias, p.m, 1, p.m, CUDA_R_32F, "the bias"}};
    char why[256];
    for (auto &x : mats)
        for (int64_t j = 0; x.ptr && j < x.cols; j++)
            if (!cuemu::written_check((const char *)x.ptr + (size_t)(j * x.ld) * elem_bytes(x.t),
                                      (size_t)x.rows * elem_bytes(x.t), why, sizeof why)) {
                cuemu::device_fault(cudaErrorLaunchFailure,
                                    std::string("a cuBLAS product reads its ") + x.name + ": " +
                                        why + " (CUDA_EMU_UNINIT=report)");
                return false;
            }
    return true;
}

/* the product, run when the stream reaches it */
void run(const product &p)
{
    shapes d = shapes_of(p);
    struct {
        const void *ptr;
        size_t bytes;
        const char *name;
    } mats[] = {{p.A, span(d.ar, d.ac, p.lda, p.at), "A"},
                {p.B, span(d.br, d.bc, p.ldb, p.bt), "B"},
                {p.beta != 0 ? p.C : nullptr, span(p.m, p.n, p.ldc, p.ct), "C"},
                {p.D, span(p.m, p.n, p.ldd, p.dt), "D"},
                {p.bias, p.bias ? sizeof(float) * (size_t)p.m : 0, "the bias"}};
    for (auto &x : mats)
        if (x.ptr && x.bytes && !cuemu::in_device_memory(x.ptr, x.bytes)) {
            char why[256];
            snprintf(why, sizeof why,
                     "a cuBLAS product's %s (%p, %zu bytes) is not inside one device allocation",
                     x.name, x.ptr, x.bytes);
            cuemu::device_fault(cudaErrorIllegalAddress, why);
            return;
        }
    if (!read_written(p))
        return;
    for (int j = 0; j < p.n; j++)
        cuemu::written_mark((const char *)p.D + (size_t)j * p.ldd * elem_bytes(p.dt),
                            (size_t)p.m * elem_bytes(p.dt));
    for (int j = 0; j < p.n; j++)
        for (int i = 0; i < p.m; i++) {
            double acc = 0;
            for (int l = 0; l < p.k; l++) {
                size_t ai = p.ta == CUBLAS_OP_N ? (size_t)l * p.lda + i : (size_t)i * p.lda + l;
                size_t bi = p.tb == CUBLAS_OP_N ? (size_t)j * p.ldb + l : (size_t)l * p.ldb + j;
                acc += load(p.A, ai, p.at, p.tf32) * load(p.B, bi, p.bt, p.tf32);
            }
            double v = p.alpha * acc;
            if (p.beta != 0)
                v += p.beta * load(p.C, (size_t)j * p.ldc + i, p.ct, false);
            if (p.epi == CUBLASLT_EPILOGUE_BIAS || p.epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
                p.epi == CUBLASLT_EPILOGUE_RELU_BIAS)
                v += p.bias[i];
            if (p.epi == CUBLASLT_EPILOGUE_GELU || p.epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                v = gelu_tanh(v);
            if ((p.epi == CUBLASLT_EPILOGUE_RELU || p.epi == CUBLASLT_EPILOGUE_RELU_BIAS) && v < 0)
                v = 0;
            store(p.D, (size_t)j * p.ldd + i, p.dt, v);
        }
}

/* the element and compute types cuBLAS has a product for, as far as this emulator computes them */
cublasStatus_t supported(cudaDataType_t at, cudaDataType_t bt, cudaDataType_t ct,
                         cublasComputeType_t c)
{
    if (!is_float(at) || at != bt || !is_float(ct) || (ct != CUDA_R_32F && ct != at))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (c == CUBLAS_COMPUTE_32F || c == CUBLAS_COMPUTE_32F_PEDANTIC)
        return CUBLAS_STATUS_SUCCESS;
    if (c == CUBLAS_COMPUTE_32F_FAST_TF32 && at == CUDA_R_32F)
        return CUBLAS_STATUS_SUCCESS;
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t queue(cudaStream_t s, const product &p)
{
    if (!p.m || !p.n)
        return CUBLAS_STATUS_SUCCESS;
    cudaError_t e = cuemu::enqueue(s, "a cuBLAS product", [p]() { run(p); });
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} /* namespace */

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_ARCH_MISMATCH:
            return "an absent device architectural feature is required";
        case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new cuemu_blas{nullptr, CUBLAS_DEFAULT_MATH};
    cuemu::keep(*h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cuemu::forget(h);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return bytes && !cuemu::in_device_memory(ws, bytes) ? CUBLAS_STATUS_INVALID_VALUE
                                                        : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* alpha and beta are host values of the compute type's scale (f32 here), read at the call */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
        lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
        ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1) ||
        !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cublasStatus_t s = supported(at, bt, ct, compute))
        return s;
    product p{ta,
              tb,
              m,
              n,
              k,
              *(const float *)alpha,
              *(const float *)beta,
              A,
              B,
              C,
              C,
              at,
              bt,
              ct,
              ct,
              lda,
              ldb,
              ldc,
              ldc,
              compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                  (h->math == CUBLAS_TF32_TENSOR_OP_MATH && at == CUDA_R_32F &&
                   compute == CUBLAS_COMPUTE_32F),
              CUBLASLT_EPILOGUE_DEFAULT,
              nullptr};
    return queue(h->stream, p);
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    return cublasGemmEx(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C,
                        CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = new cuemu_lt{0};
    cuemu::keep(*h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    cuemu::forget(h);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    *d = new cuemu_lt_desc{compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                           nullptr};
    cuemu::keep(*d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    cuemu::forget(d);
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

/* each attribute as the size its type has, as cuBLASLt checks */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t bytes)
{
    if (!d || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
        case CUBLASLT_MATMUL_DESC_TRANSB: {
            if (bytes != sizeof(int32_t))
                return CUBLAS_STATUS_INVALID_VALUE;
            cublasOperation_t op = (cublasOperation_t) * (const int32_t *)buf;
            (a == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = op;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_EPILOGUE:
            if (bytes != sizeof(uint32_t))
                return CUBLAS_STATUS_INVALID_VALUE;
            d->epi = (cublasLtEpilogue_t) * (const uint32_t *)buf;
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            if (bytes != sizeof(void *))
                return CUBLAS_STATUS_INVALID_VALUE;
            memcpy(&d->bias, buf, sizeof(void *));
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
            return bytes == sizeof(int32_t) && *(const int32_t *)buf == CUDA_R_32F
                       ? CUBLAS_STATUS_SUCCESS
                       : CUBLAS_STATUS_NOT_SUPPORTED;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    if (ld < (int64_t)(rows > 1 ? rows : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    *l = new cuemu_lt_layout{t, rows, cols, ld};
    cuemu::keep(*l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    cuemu::forget(l);
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = new cuemu_lt_pref{0};
    cuemu::keep(*p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    cuemu::forget(p);
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t bytes)
{
    if (!p || !buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (bytes != sizeof(uint64_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        p->workspace = *(const uint64_t *)buf;
        return CUBLAS_STATUS_SUCCESS;
    }
    return a == CUBLASLT_MATMUL_PREF_SEARCH_MODE ? CUBLAS_STATUS_SUCCESS
                                                 : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* shapes that agree (op(A) m x k, op(B) k x n, C and D m x n), types that have a product */
static cublasStatus_t check_lt(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                               cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                               cublasLtMatrixLayout_t dl)
{
    if (!d || !a || !b || !c || !dl)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m = d->ta == CUBLAS_OP_N ? a->rows : a->cols,
             k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols,
             n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (k != kb || c->rows != m || c->cols != n || dl->rows != m || dl->cols != n ||
        c->type != dl->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    switch (d->epi) {
        case CUBLASLT_EPILOGUE_DEFAULT:
        case CUBLASLT_EPILOGUE_RELU:
        case CUBLASLT_EPILOGUE_BIAS:
        case CUBLASLT_EPILOGUE_RELU_BIAS:
        case CUBLASLT_EPILOGUE_GELU:
        case CUBLASLT_EPILOGUE_GELU_BIAS: break;
        default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return supported(a->type, b->type, dl->type, d->compute);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *results,
                                              int *returned)
{
    if (!h || !p || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    if (cublasStatus_t s = check_lt(d, a, b, c, dl))
        return s;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = 0x63756d75; /* any value: the emulator has one algorithm */
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t al, const void *B,
                              cublasLtMatrixLayout_t bl, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t s)
{
    (void)algo;
    if (!h || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (cublasStatus_t st = check_lt(d, al, bl, cl, dl))
        return st;
    if (ws_bytes && !cuemu::in_device_memory(ws, ws_bytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool needs_bias = d->epi == CUBLASLT_EPILOGUE_BIAS || d->epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
                      d->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
    if (needs_bias && !d->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    product p{d->ta,
              d->tb,
              (int)dl->rows,
              (int)dl->cols,
              (int)(d->ta == CUBLAS_OP_N ? al->cols : al->rows),
              *(const float *)alpha,
              *(const float *)beta,
              A,
              B,
              C,
              D,
              al->type,
              bl->type,
              cl->type,
              dl->type,
              al->ld,
              bl->ld,
              cl->ld,
              dl->ld,
              d->compute == CUBLAS_COMPUTE_32F_FAST_TF32,
              d->epi,
              needs_bias ? (const float *)d->bias : nullptr};
    return queue(s, p);
}
