/* Matrix products through cuBLASLt and cuBLAS, accumulating in f32 (f32 weights stay f32: no TF32).
 * f16/bf16 weights: the activations are rounded to the weights' type first (the CPU twin keeps f32
 * activations: agreement is to about 1e-3). Bias and GELU ride in cuBLASLt's epilogue; where it has
 * no algorithm for a case, a plain GEMM and separate kernels do the same. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

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

int cuda_rounded_out(kb_backend *b, const float *y, size_t elems, cu_rounded *out)
{
    cuda_state *s = cuda_of(b);
    if (s->round_wanted != DT_F32 && cuda_grow(b, &s->rounded, &s->rounded_bytes, elems * 2))
        return -1;
    s->round_src = y;
    s->round_elems = elems;
    s->round_made = s->round_wanted;
    out->p = s->rounded;
    out->t = s->round_made;
    return 0;
}

const void *cuda_rounded_of(kb_backend *b, const float *x, size_t elems, dtype t)
{
    cuda_state *s = cuda_of(b);
    if (t == DT_BF16 || t == DT_F16)
        s->round_wanted = t; /* the producers make this type from now on */
    if (x != s->round_src || elems != s->round_elems || t != s->round_made || t == DT_F32)
        return NULL;
    return s->rounded;
}

void cuda_rounded_forget(kb_backend *b, const void *p)
{
    cuda_state *s = cuda_of(b);
    if (p == s->round_src)
        s->round_src = NULL;
}

/* q8, q4 and q6 weights as the f32 matrix [rows, cols] they stand for (row-major), for the GEMMs
 * of prefill and of the basic kernels: by_column (matmul's storage) holds column j's rows
 * contiguously; a q4 block's byte j holds its values j and j + 16 */
__global__ static void dequant(float *dst, const unsigned char *q, const uint16_t *scales, int rows,
                               int cols, int by_column, dtype t)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols)
        return;
    size_t r = i / cols, c = i % cols, at = by_column ? c * rows + r : i;
    float d = __half2float(__ushort_as_half(scales[at / DT_Q8_BLOCK]));
    if (t == DT_Q6) {
        dst[i] =
            (float)dt_q6_value(q + at / DT_Q6_BLOCK * DT_Q6_BLOCK_BYTES, (int)(at % DT_Q6_BLOCK)) *
            d;
    } else if (t == DT_Q4) {
        size_t e = at % DT_Q4_BLOCK;
        unsigned char v = q[at / DT_Q4_BLOCK * 16 + e % 16];
        dst[i] = (float)((e < 16 ? v & 15 : v >> 4) - 8) * d;
    } else {
        dst[i] = (float)(signed char)q[at] * d;
    }
}

/* w itself, or (q8, q4, q6) its f32 expansion in scratch */
static int gemm_weights(kb_backend *b, const kb_mat *w, int by_column, kb_mat *out)
{
    *out = *w;
    if (w->type != DT_Q8 && w->type != DT_Q4 && w->type != DT_Q6)
        return 0;
    size_t n = (size_t)w->rows * w->cols;
    void *f;
    if (cuda_scratch(b, n * sizeof(float), &f))
        return -1;
    dequant<<<(unsigned)((n + 255) / 256), 256, 0, cuda_stream(b)>>>(
        (float *)f, (const unsigned char *)w->data, w->scales, w->rows, w->cols, by_column,
        w->type);
    CK_LAUNCH();
    *out = (kb_mat){f, DT_F32, w->rows, w->cols, NULL, 0};
    return 0;
}

/* x as the GEMM reads it: as is for f32 weights, else rounded to the weights' 16-bit type (by the
 * kernel that wrote x when it could, else here) */
static int operand(kb_backend *b, const kb_mat *w, const float *x, size_t elems, const void **out)
{
    if (w->type == DT_F32) {
        *out = x;
        return 0;
    }
    if ((*out = cuda_rounded_of(b, x, elems, w->type)))
        return 0;
    void *x16;
    if (cuda_scratch(b, elems * 2, &x16) || cuda_to_16bit(b, x16, x, w->type, elems))
        return -1;
    *out = x16;
    return 0;
}

/* A cuBLASLt plan for one shape and epilogue: descriptors and the algorithm its heuristic chose,
 * made once (asking the heuristic costs more host time than a small GEMM takes). */
struct cu_lt_plan {
    int N, n, K, epi;
    dtype t;
    int usable; /* 0: cuBLASLt has no algorithm for it */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    unsigned long long used;
};

static void plan_free(cu_lt_plan *p)
{
    if (p->ld)
        cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

int cuda_plans_init(cuda_state *s)
{
    s->plans = (cu_lt_plan *)calloc(CUDA_PLANS, sizeof *s->plans);
    return s->plans ? 0 : err_set("out of memory");
}

void cuda_plans_free(cuda_state *s)
{
    for (int i = 0; s->plans && i < CUDA_PLANS; i++)
        plan_free(&s->plans[i]);
    free(s->plans);
    s->plans = NULL;
}

#define CL(call)                                                                                  \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            rc = err_set("%s: %s (%s:%d)", #call, cublasGetStatusString(s_), __FILE__, __LINE__); \
            goto out;                                                                             \
        }                                                                                         \
    } while (0)

static int make_plan(cuda_state *s, cu_lt_plan *p)
{
    int rc = 0, found = 0;
    cudaDataType_t t = cuda_type(p->t);
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)p->epi;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t h;
    size_t ws = CUDA_BLAS_WORKSPACE;
    CL(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CL(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CL(cublasLtMatrixLayoutCreate(&p->la, t, p->N, p->K, p->N));
    CL(cublasLtMatrixLayoutCreate(&p->lb, t, p->K, p->n, p->K));
    CL(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_32F, p->N, p->n, p->N));
    CL(cublasLtMatmulPreferenceCreate(&pref));
    CL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws));
    {
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s->lt, p->op, p->la, p->lb, p->ld, p->ld,
                                                           pref, 1, &h, &found);
        if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
            CL(st);
    }
    p->usable = found > 0;
    if (p->usable)
        p->algo = h.algo;
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

/* the plan for this case: kept, or made in the least recently used slot */
static int plan_for(cuda_state *s, int N, int n, int K, dtype t, int epi, cu_lt_plan **out)
{
    cu_lt_plan *lru = &s->plans[0];
    for (int i = 0; i < CUDA_PLANS; i++) {
        cu_lt_plan *p = &s->plans[i];
        if (p->op && p->N == N && p->n == n && p->K == K && p->t == t && p->epi == epi) {
            p->used = ++s->tick;
            *out = p;
            return 0;
        }
        if (p->used < lru->used)
            lru = p;
    }
    plan_free(lru);
    lru->N = N;
    lru->n = n;
    lru->K = K;
    lru->epi = epi;
    lru->t = t;
    lru->used = ++s->tick;
    if (make_plan(s, lru)) {
        plan_free(lru);
        return -1;
    }
    *out = lru;
    return 0;
}

/* column-major y[N, n] = act(W[N, K] x[K, n] + bias) in one cuBLASLt call, the bias and GELU
 * applied by its epilogue. 1: no algorithm for this case (the caller does it in steps). */
static int fused(kb_backend *b, float *y, const void *x, int n, const kb_mat *w, const float *bias,
                 kb_act act)
{
    cuda_state *s = cuda_of(b);
    cublasLtEpilogue_t epi = act == KB_GELU
                                 ? (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                 : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
    cu_lt_plan *p;
    if (plan_for(s, w->cols, n, w->rows, w->type, (int)epi, &p))
        return -1;
    if (!p->usable)
        return 1;
    const float one = 1.0f, zero = 0.0f;
    if (bias)
        CB(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
    cublasStatus_t st =
        cublasLtMatmul(s->lt, p->op, &one, w->data, p->la, x, p->lb, &zero, y, p->ld, y, p->ld,
                       &p->algo, s->blas_work, CUDA_BLAS_WORKSPACE, s->stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
        p->usable = 0;
        return 1;
    }
    CB(st);
    return 0;
}

/* the same in steps: bias rows, a cuBLAS GEMM accumulating onto them, then GELU */
static int stepwise(kb_backend *b, float *y, const void *x, int n, const kb_mat *w,
                    const float *bias, kb_act act)
{
    cuda_state *s = cuda_of(b);
    int K = w->rows, N = w->cols;
    const float one = 1.0f, beta = bias ? 1.0f : 0.0f;
    if (bias && cuda_fill_rows(b, y, bias, n, N))
        return -1;
    cudaDataType_t t = cuda_type(w->type);
    CB(cublasGemmEx(s->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, n, K, &one, w->data, t, N, x, t, K, &beta,
                    y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return act == KB_GELU ? cuda_gelu(b, y, (size_t)n * N) : 0;
}

int cuda_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *wq, const float *bias,
                kb_act act)
{
    /* row-major y[n, N] = x[n, K] W[K, N] is column-major y^T[N, n] = W^T[N, K] x^T[K, n], and the
     * row-major W is already a column-major [N, K] */
    const void *xin;
    kb_mat wm, *w = &wm;
    if (gemm_weights(b, wq, 1, &wm) || operand(b, w, x, (size_t)w->rows * n, &xin))
        return -1;
    cuda_rounded_forget(b, y);
    int rc = fused(b, y, xin, n, w, bias, act);
    return rc == 1 ? stepwise(b, y, xin, n, w, bias, act) : rc;
}

int cuda_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *wq)
{
    /* y[n, V] = x[n, C] W^T with W [V, C]: column-major y^T[V, n] = (stored [C, V])^T x^T[C, n] */
    cuda_state *s = cuda_of(b);
    int V = wq->rows, C = wq->cols;
    const float one = 1.0f, zero = 0.0f;
    const void *xin;
    kb_mat wm, *w = &wm;
    if (gemm_weights(b, wq, 0, &wm) || operand(b, w, x, (size_t)C * n, &xin))
        return -1;
    cuda_rounded_forget(b, y);
    cudaDataType_t t = cuda_type(w->type);
    CB(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, V, n, C, &one, w->data, t, C, xin, t, C,
                    &zero, y, CUDA_R_32F, V, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}
