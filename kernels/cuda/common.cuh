/* Shared by the CUDA kernels: error checks that carry the call and its error string up to err.h,
 * the backend's state, and the kernels' entry points. Every CUDA and cuBLAS call goes through
 * CK/CB. */
#ifndef KVCHAT_CUDA_COMMON_CUH
#define KVCHAT_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../err.h"
#include "../kvlayout.h"
#include "cuda.h"

#define CK(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess)                                                                   \
            return err_set("%s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define CB(call)                                                                         \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return err_set("%s: %s (%s:%d)", #call, cublasGetStatusString(s_), __FILE__, \
                           __LINE__);                                                    \
    } while (0)
/* after a launch: configuration errors now, execution errors at the next synchronising call */
#define CK_LAUNCH() CK(cudaGetLastError())

/* The scalars of the current step in device memory (kb_step, kb_sample): kernels read them from
 * here, so a recorded decode step replays with the values of each new step. A pinned host twin
 * feeds it. */
typedef struct {
    int past, n, n_hist, top_k;
    int pos; /* the first new token's position (kb_step.pos0) */
    float temp, top_p, penalty;
    int out;          /* the chosen id */
    unsigned floor_q; /* the kept set's threshold the sampler found (the tests read it) */
    double u;
    int cap;     /* capacity of ids and of hist */
    int data[1]; /* ids[cap] then hist[cap] */
} cu_step;

static inline __host__ __device__ const int *cu_ids(const cu_step *s) { return s->data; }
static inline __host__ __device__ const int *cu_hist(const cu_step *s) { return s->data + s->cap; }
static inline size_t cu_step_bytes(int cap)
{
    return sizeof(cu_step) + sizeof(int) * (2 * (size_t)cap - 1);
}

enum { CU_EAGER, CU_CAPTURE, CU_REPLAY };
enum { CUDA_BLAS_WORKSPACE = 32 << 20, CUDA_GRAPHS = 4, CUDA_PLANS = 32 };

typedef struct cu_lt_plan cu_lt_plan; /* matmul.cu */

/* one recorded decode step: what it was recorded under, and the graph */
typedef struct {
    unsigned char key[256];
    size_t key_bytes; /* 0: a free slot */
    unsigned generation;
    int eager_only; /* recording failed once: always run this one eagerly */
    unsigned long long used;
    cudaGraphExec_t exec; /* NULL until the second time the step is seen */
} cu_graph;

struct cuda_state {
    cudaStream_t stream; /* all work: one stream, so copies and kernels stay in order */
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_work; /* cuBLAS(Lt) workspace, fixed so that graph capture never allocates */
    void *scratch;   /* grows: 16-bit activations, block tables of views without a device copy */
    size_t scratch_bytes;
    void *sample_work; /* vocab floats a row: penalised logits, then integer probabilities */
    size_t sample_bytes;
    void *odds_host, *odds_dev; /* an odds call's rows (sample.cu): pinned host, device */
    float
        *partials; /* decode attention: a counter per head, then per (head, chunk) max, sum, row */
    size_t partial_bytes;
    void *probe; /* decode attention's probe: its spans, the mass per (layer, head, span), the
                    exponentials per (head, position) */
    size_t probe_bytes;
    void
        *mv_work; /* one-token products: a counter per column tile, then the slices' partial sums */
    size_t mv_bytes;
    void *rounded; /* the 16-bit rounding of round_src (see cuda_rounded_out) */
    size_t rounded_bytes;
    const float *round_src;
    size_t round_elems;
    dtype round_made, round_wanted; /* its type; the type the last 16-bit GEMM read */
    cu_step *hstep, *dstep;         /* the step's scalars: pinned host, device */
    int step_cap;
    int *hist_sent,
        n_hist_sent;     /* the history ids the device holds (a step sends those that changed) */
    unsigned generation; /* bumped when a buffer above moves: recorded steps hold its addresses */
    kb_kernels kernels;  /* the fast kernels, or the basic ones (the previous release's) */
    /* the step in progress */
    int mode, in_step;
    int *out; /* where step_end puts the chosen id */
    cu_graph graphs[CUDA_GRAPHS], *cur;
    cu_lt_plan *plans;          /* CUDA_PLANS cuBLASLt plans (matmul.cu) */
    cudaEvent_t started, ended; /* around each step: its device time */
    double step_seconds;
    unsigned long long tick;
    long replays;
    int nodes; /* of the last recorded step */
    cudaDeviceProp prop;
};

static inline cuda_state *cuda_of(kb_backend *b) { return (cuda_state *)b->ctx; }
static inline cudaStream_t cuda_stream(kb_backend *b) { return cuda_of(b)->stream; }
/* A 16-bit rounding of the last activations written by a kernel that feeds a GEMM (layernorm,
 * attention): the GEMM of 16-bit weights reads it instead of converting its input in a pass of its
 * own. Only the type the last 16-bit GEMM read is made (t DT_F32: none yet). A producer asks where
 * to write it for y; a consumer finds it for x or gets NULL; any other write to a buffer makes its
 * rounding stale. */
typedef struct {
    void *p;
    dtype t;
} cu_rounded;
int cuda_rounded_out(kb_backend *b, const float *y, size_t elems, cu_rounded *out);
/* y[i] = v, and its rounding */
__device__ __forceinline__ void cu_put(float *y, cu_rounded r, size_t i, float v)
{
    y[i] = v;
    if (r.t == DT_BF16)
        ((__nv_bfloat16 *)r.p)[i] = __float2bfloat16_rn(v);
    else if (r.t == DT_F16)
        ((__half *)r.p)[i] = __float2half_rn(v);
}
const void *cuda_rounded_of(kb_backend *b, const float *x, size_t elems, dtype t);
void cuda_rounded_forget(kb_backend *b, const void *p);

/* buffers that grow, each bumping the generation when it moves */
int cuda_grow(kb_backend *b, void **buf, size_t *have, size_t bytes);
int cuda_scratch(kb_backend *b, size_t bytes, void **out);
/* writes the scalars into the pinned twin; upload queues the copy of what they fill to the device:
 * the history ids that changed, then (with_header) the scalars and the new ids, which a recorded
 * step copies itself */
int cuda_stage(cuda_state *s, const int *ids, int n, int past, int pos, const kb_sample *pick);
int cuda_upload(cuda_state *s, int with_header);
static inline size_t cu_header_bytes(int n)
{
    return offsetof(cu_step, data) + sizeof(int) * (size_t)n;
}
/* the step's scalars on the device: those of the current step, or (outside a step) these, past
 * also the first new token's position */
int cuda_step_args(kb_backend *b, const int *ids, int n, int past, const kb_sample *pick,
                   const cu_step **dev);

int cuda_step_begin(kb_backend *b, const kb_step *st, int *replayed);
int cuda_step_end(kb_backend *b, int ok);
double cuda_step_seconds(kb_backend *b);
void cuda_graphs_free(cuda_state *s);
int cuda_plans_init(cuda_state *s);
void cuda_plans_free(cuda_state *s);

int cuda_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
                kb_act act);
int cuda_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w);
int cuda_embed(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte,
               const kb_mat *wpe);
int cuda_layernorm(kb_backend *b, float *y, const float *x, const float *g, const float *beta,
                   int n, int C, float eps);
int cuda_add_layernorm(kb_backend *b, float *y, float *x, const float *r, const float *g,
                       const float *beta, int n, int C, float eps);
int cuda_gelu(kb_backend *b, float *x, size_t n);
/* the most tokens one fused launch takes (kernels/cuda/matvec.cu); the backend's step_rows */
enum { CU_TOKENS = 8 };
int cuda_linear(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
                const kb_norm *norm, kb_act act, int residual);
int cuda_linear_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                  const kb_norm *norm);
int cuda_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past,
                   int n, const kb_probe *probe);
int cuda_sample(kb_backend *b, int *out, const float *logits, int vocab, const kb_sample *s);
int cuda_odds(kb_backend *b, kb_odds *out, const float *logits, int n, int vocab,
              const kb_sample *s, const int *ids, const double *u_rest);
/* y[i, :] = bias for n rows of N; to_16bit: f32 -> f16 or bf16 */
int cuda_fill_rows(kb_backend *b, float *y, const float *bias, int n, int N);
int cuda_to_16bit(kb_backend *b, void *dst, const float *src, dtype t, size_t n);

/* the sum of v over the block (any multiple of 32 threads); red holds 32 floats */
__device__ __forceinline__ float cu_block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* red may still be read from the last call */
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0;
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; w++)
        total += red[w];
    return total;
}

/* For kernels whose blocks each leave a partial result in global memory: true in the one block that
 * arrives last at *count (reset for the next launch), which may then read the other blocks'
 * partials (with __ldcg: not through the incoherent L1). flag: a shared int. Every thread calls it.
 */
__device__ __forceinline__ int cu_last_block(unsigned *count, unsigned blocks, int *flag)
{
    __threadfence(); /* this block's partial is visible to every block before the count says so */
    __syncthreads();
    if (threadIdx.x == 0)
        *flag = atomicAdd(count, 1u) == blocks - 1;
    __syncthreads();
    if (!*flag)
        return 0;
    __threadfence(); /* and the others' partials are read only after their counts */
    if (threadIdx.x == 0)
        *count = 0; /* every block of this launch has counted */
    return 1;
}

/* the tanh form of GELU that GPT-2 uses */
__device__ __forceinline__ float cu_gelu(float v)
{
    return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

/* 16 bytes of a storage dtype: E elements, widened to float by cu_widen (the caller loads them,
 * through the read-only cache or not) */
template <dtype T>
struct cu_vec {
    enum { SIZE = T == DT_F32 ? 4 : T == DT_I8 ? 1 : 2, E = 16 / SIZE };
};
template <dtype T>
__device__ __forceinline__ void cu_widen(uint4 raw, float *o)
{
    unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if constexpr (T == DT_F32) {
            o[k] = __uint_as_float(w[k]);
        } else if constexpr (T == DT_BF16) {
            o[2 * k] = __uint_as_float(w[k] << 16);
            o[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        } else if constexpr (T == DT_F16) {
            o[2 * k] = __half2float(__ushort_as_half((unsigned short)(w[k] & 0xffffu)));
            o[2 * k + 1] = __half2float(__ushort_as_half((unsigned short)(w[k] >> 16)));
        } else {
#pragma unroll
            for (int b = 0; b < 4; b++)
                o[4 * k + b] = (float)(signed char)(w[k] >> (8 * b));
        }
    }
}

/* element loads of any storage dtype, widened to float (int8 and q8 without their scales) */
__device__ __forceinline__ float cu_load(const void *p, size_t i, dtype t)
{
    if (t == DT_F32)
        return ((const float *)p)[i];
    if (t == DT_I8 || t == DT_Q8)
        return (float)((const signed char *)p)[i];
    unsigned short h = ((const unsigned short *)p)[i];
    if (t == DT_BF16)
        return __uint_as_float((unsigned)h << 16);
    if (t == DT_I8)
        return (float)((const signed char *)p)[i];
    return __half2float(__ushort_as_half(h));
}

#endif
