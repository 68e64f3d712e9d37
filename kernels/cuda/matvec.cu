/* The fused one-token products of a decode step (backend.h's linear and linear_t), in place of
 * cuBLASLt's one-row GEMMs and the small kernels around them. Each weight is read once with 16-byte
 * loads; the layernorm is applied on the way in (every block recomputes the row's mean and
 * variance: a few KB from L2) and the bias, GELU or residual add on the way out. x stays f32 in
 * shared memory (rounded to bf16 there against bf16 weights, as the CPU twin defines that product),
 * so no 16-bit copy of it is made in device memory. The CPU twin is kernels/cpu/linear.c.
 *
 * linear, W [K, N] row-major (GPT-2's Conv1D layout): a block owns a tile of columns and a slice of
 * rows. Eight threads cover a 16-byte-wide strip of a row (one 128-byte line), 32 rows at a time.
 * With several slices, each leaves its partial sums in a buffer and the last block of a tile to
 * arrive adds them in slice order (deterministic: no float atomics) and applies the epilogue.
 * linear_t, W [V, K] (the tied embedding): a warp per output, eight rows a warp, a dot product with
 * 16-byte loads along the row. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.cuh"

/* E elements of a weight from one 16-byte load through the read-only cache (vec: aligned and
 * whole), widened to float; else element by element, the first `valid` of them */
template <dtype T>
__device__ __forceinline__ void load_w(const void *p, size_t i, int vec, int valid, float *o)
{
    if (vec) {
        cu_widen<T>(__ldg((const uint4 *)((const char *)p + i * cu_vec<T>::SIZE)), o);
        return;
    }
    for (int e = 0; e < cu_vec<T>::E; e++)
        o[e] = e < valid ? cu_load(p, i + e, T) : 0.0f;
}

/* the layernorm's mean and 1/stddev of x[0..K) (two passes, as the CPU twin) */
__device__ static void row_stats(const float *x, int K, float eps, float *red, float *mean,
                                 float *rstd)
{
    float s = 0, v = 0;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        s += x[k];
    float m = cu_block_sum(s, red) / K;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        v += (x[k] - m) * (x[k] - m);
    *mean = m;
    *rstd = rsqrtf(cu_block_sum(v, red) / K + eps);
}

typedef struct {
    float *y;
    const float *x, *bias, *g, *beta; /* g NULL: no layernorm */
    const void *w;
    float eps;
    int K, N, slice_rows, act, residual, vec;
    float *part;     /* [slices, N] partial sums */
    unsigned *count; /* per tile: blocks arrived (the last resets it) */
} mv_args;

enum {
    MV_THREADS = 256,
    MV_LANES = 8,
    MV_ROWS = MV_THREADS / MV_LANES,
    MV_MAX_SLICE = 8192,
    MV_COUNTERS = 4096
};

__device__ static void finish(const mv_args &a, int j, float v)
{
    if (a.bias)
        v += a.bias[j];
    if (a.act == KB_GELU)
        v = cu_gelu(v);
    a.y[j] = a.residual ? a.y[j] + v : v;
}

/* xs[0..k1 - k0) = the inputs k0..k1, normalised when the product has a norm (its statistics over
 * all K), and rounded to bf16 against bf16 weights (the CPU twin's definition of that product:
 * kernels/cpu/matmul_bf16.c); red: 32 floats of shared memory. Every thread calls it; xs is ready
 * when it returns. */
template <dtype T>
__device__ static void load_input(const mv_args &a, float *xs, int k0, int k1, float *red)
{
    float mean = 0, rstd = 1;
    if (a.g)
        row_stats(a.x, a.K, a.eps, red, &mean, &rstd);
    for (int k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
        float v = a.g ? (a.x[k] - mean) * rstd * a.g[k] + a.beta[k] : a.x[k];
        xs[k - k0] = T == DT_BF16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
    }
    __syncthreads();
}

enum { MT_THREADS = 256, MT_WARPS = MT_THREADS / 32, MT_ROWS = 8 };

/* each lane's partial sums of a warp's MT_ROWS outputs from v0, summed over the warp and finished
 */
__device__ static void rows_out(const mv_args &a, const float *acc, int v0, int V)
{
#pragma unroll
    for (int q = 0; q < MT_ROWS; q++) {
        float s = acc[q];
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x % 32 == 0 && v0 + q < V)
            finish(a, v0 + q, s);
    }
}

/* grid (tiles of MV_LANES * E columns, slices of slice_rows rows) */
template <dtype T>
__global__ static void __launch_bounds__(MV_THREADS) linear_k(mv_args a)
{
    enum { E = cu_vec<T>::E, TN = MV_LANES * E };
    extern __shared__ float xs[]; /* the slice's input rows, normalised */
    __shared__ float sums[MV_ROWS * TN], red[32];
    __shared__ int last;
    int tid = threadIdx.x, lane = tid % MV_LANES, r = tid / MV_LANES, slices = gridDim.y;
    int k0 = blockIdx.y * a.slice_rows, k1 = min(a.K, k0 + a.slice_rows),
        col = blockIdx.x * TN + lane * E;
    load_input<T>(a, xs, k0, k1, red);
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; e++)
        acc[e] = 0;
    if (col < a.N) {
        int valid = min(E, a.N - col), k = k0 + r;
        /* four loads in flight before their products */
        for (; k + 3 * MV_ROWS < k1; k += 4 * MV_ROWS) {
            float w[4][E];
#pragma unroll
            for (int u = 0; u < 4; u++)
                load_w<T>(a.w, (size_t)(k + u * MV_ROWS) * a.N + col, a.vec, valid, w[u]);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                float xv = xs[k + u * MV_ROWS - k0];
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[e] += xv * w[u][e];
            }
        }
        for (; k < k1; k += MV_ROWS) {
            float w[E];
            load_w<T>(a.w, (size_t)k * a.N + col, a.vec, valid, w);
            float xv = xs[k - k0];
#pragma unroll
            for (int e = 0; e < E; e++)
                acc[e] += xv * w[e];
        }
    }
#pragma unroll
    for (int e = 0; e < E; e++)
        sums[r * TN + lane * E + e] = acc[e];
    __syncthreads();
    int j = blockIdx.x * TN + tid;
    float s = 0;
    if (tid < TN)
        for (int q = 0; q < MV_ROWS; q++)
            s += sums[q * TN + tid];
    if (slices == 1) {
        if (tid < TN && j < a.N)
            finish(a, j, s);
        return;
    }
    if (tid < TN && j < a.N)
        a.part[(size_t)blockIdx.y * a.N + j] = s;
    if (!cu_last_block(&a.count[blockIdx.x], (unsigned)slices, &last))
        return;
    if (tid < TN && j < a.N) {
        float total = 0;
        for (int q = 0; q < slices; q++)
            total += __ldcg(a.part + (size_t)q * a.N + j);
        finish(a, j, total);
    }
}

/* grid (rows / (MT_WARPS * MT_ROWS)): y[v] = norm(x) . W[v, :] */
template <dtype T>
__global__ static void __launch_bounds__(MT_THREADS) linear_t_k(mv_args a, int V)
{
    enum { E = cu_vec<T>::E };
    extern __shared__ float xs[]; /* all K inputs, normalised */
    __shared__ float red[32];
    int lane = threadIdx.x % 32, v0 = (blockIdx.x * MT_WARPS + threadIdx.x / 32) * MT_ROWS;
    load_input<T>(a, xs, 0, a.K, red);
    float acc[MT_ROWS];
#pragma unroll
    for (int q = 0; q < MT_ROWS; q++)
        acc[q] = 0;
    for (int k = lane * E; k < a.K; k += 32 * E) {
        int valid = min(E, a.K - k);
#pragma unroll
        for (int q = 0; q < MT_ROWS; q++) {
            float w[E];
            if (v0 + q < V) {
                load_w<T>(a.w, (size_t)(v0 + q) * a.K + k, a.vec, valid, w);
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[q] += xs[k + e < a.K ? k + e : 0] * w[e]; /* w[e] is 0 past the end */
            }
        }
    }
    rows_out(a, acc, v0, V); /* the LM head: no bias, act or residual */
}

/* q8 weights (stored along the reduction: each output's K values are one row) through the same rows
 * as linear_t_k, as the CPU twin computes them: the input is quantised per block of 32 (d = max|x|
 * / 127, q = round(x / d), the same float operations), a lane takes 16 bytes of a row (half a
 * block), dp4a makes the integer dot exact, and each half's is scaled by both blocks' scales. The
 * epilogue of linear (bias, GELU, residual) follows; with none of those it is the LM head. */
__global__ static void __launch_bounds__(MT_THREADS)
    rows_q8_k(mv_args a, const uint16_t *scales, int V)
{
    extern __shared__ float xs[]; /* K inputs, normalised; then K int8 and K / 32 scales */
    __shared__ float red[32];
    int K = a.K, blocks = K / DT_Q8_BLOCK, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int v0 = (blockIdx.x * MT_WARPS + warp) * MT_ROWS;
    signed char *xq = (signed char *)(xs + K);
    float *xd = xs + K + K / 4;
    load_input<DT_Q8>(a, xs, 0, K, red);
    for (int b = warp; b < blocks; b += MT_WARPS) { /* a warp a block: lane i holds element i */
        float v = xs[b * DT_Q8_BLOCK + lane], amax = fabsf(v);
        for (int o = 16; o > 0; o >>= 1)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        xq[b * DT_Q8_BLOCK + lane] = (signed char)roundf(v * inv);
        if (lane == 0)
            xd[b] = d;
    }
    __syncthreads();
    float acc[MT_ROWS];
#pragma unroll
    for (int q = 0; q < MT_ROWS; q++)
        acc[q] = 0;
    for (int k = lane * 16; k < K; k += 32 * 16) {
        const int *xw = (const int *)(xq + k);
        int b = k / DT_Q8_BLOCK;
#pragma unroll
        for (int q = 0; q < MT_ROWS; q++) {
            if (v0 + q >= V)
                continue;
            uint4 w = __ldg((const uint4 *)((const signed char *)a.w + (size_t)(v0 + q) * K + k));
            int dot = __dp4a((int)w.x, xw[0], 0);
            dot = __dp4a((int)w.y, xw[1], dot);
            dot = __dp4a((int)w.z, xw[2], dot);
            dot = __dp4a((int)w.w, xw[3], dot);
            float dw = __half2float(__ushort_as_half(scales[(size_t)(v0 + q) * blocks + b]));
            acc[q] += dw * xd[b] * (float)dot;
        }
    }
    rows_out(a, acc, v0, V);
}

static int launch_rows_q8(kb_backend *b, mv_args a, const uint16_t *scales, int V)
{
    size_t shared =
        sizeof(float) * (size_t)a.K + (size_t)a.K + sizeof(float) * (size_t)(a.K / DT_Q8_BLOCK);
    if (a.K % DT_Q8_BLOCK || shared > 48 * 1024)
        return err_set("a q8 product over %d values: the kernel takes multiples of %d up to 8,192",
                       a.K, DT_Q8_BLOCK);
    unsigned blocks = (unsigned)((V + MT_WARPS * MT_ROWS - 1) / (MT_WARPS * MT_ROWS));
    rows_q8_k<<<blocks, MT_THREADS, shared, cuda_stream(b)>>>(a, scales, V);
    CK_LAUNCH();
    return 0;
}

/* the arguments of a product over K inputs to N outputs of w; 16-byte loads where its rows allow */
static mv_args args_for(float *y, const float *x, const kb_mat *w, const float *bias,
                        const kb_norm *norm, kb_act act, int residual, int K, int N)
{
    mv_args a = {y,
                 x,
                 bias,
                 norm ? norm->g : NULL,
                 norm ? norm->b : NULL,
                 w->data,
                 norm ? norm->eps : 0.0f,
                 K,
                 N,
                 0,
                 act,
                 residual,
                 0,
                 NULL,
                 NULL};
    a.vec = ((size_t)w->data & 15) == 0 && (size_t)w->cols * dt_size(w->type) % 16 == 0;
    return a;
}

/* counters (zeroed once; each product's last blocks leave them zero) and the partial sums */
static int mv_buffers(kb_backend *b, size_t part_floats, unsigned **count, float **part)
{
    cuda_state *s = cuda_of(b);
    size_t bytes = sizeof(unsigned) * MV_COUNTERS + sizeof(float) * part_floats;
    if (bytes > s->mv_bytes) {
        if (cuda_grow(b, &s->mv_work, &s->mv_bytes, bytes))
            return -1;
        CK(cudaMemsetAsync(s->mv_work, 0, sizeof(unsigned) * MV_COUNTERS, s->stream));
    }
    *count = (unsigned *)s->mv_work;
    *part = (float *)(*count + MV_COUNTERS);
    return 0;
}

template <dtype T>
static int launch_linear(kb_backend *b, mv_args a)
{
    cuda_state *s = cuda_of(b);
    int TN = MV_LANES * cu_vec<T>::E, tiles = (a.N + TN - 1) / TN;
    /* enough blocks for two per multiprocessor, each slice at least two rounds of MV_ROWS rows */
    int want = (2 * s->prop.multiProcessorCount + tiles - 1) / tiles,
        most = (a.K + 2 * MV_ROWS - 1) / (2 * MV_ROWS);
    int slices = want < most ? want : most,
        rows = (a.K + slices - 1) / slices; /* both at least 1 */
    rows = (rows + MV_ROWS - 1) / MV_ROWS * MV_ROWS;
    if (rows > MV_MAX_SLICE)
        rows = MV_MAX_SLICE;
    slices = (a.K + rows - 1) / rows;
    if (tiles > MV_COUNTERS)
        return err_set("a one-token product of %d columns; the kernel counts at most %d tiles", a.N,
                       MV_COUNTERS);
    a.slice_rows = rows;
    if (slices > 1 && mv_buffers(b, (size_t)slices * a.N, &a.count, &a.part))
        return -1;
    linear_k<T><<<dim3(tiles, slices), MV_THREADS, sizeof(float) * rows, s->stream>>>(a);
    CK_LAUNCH();
    return 0;
}

int cuda_linear(kb_backend *b, float *y, const float *x, const kb_mat *w, const float *bias,
                const kb_norm *norm, kb_act act, int residual)
{
    mv_args a = args_for(y, x, w, bias, norm, act, residual, w->rows, w->cols);
    cuda_rounded_forget(b, y);
    switch (w->type) {
        case DT_Q8: return launch_rows_q8(b, a, w->scales, w->cols);
        case DT_F32: return launch_linear<DT_F32>(b, a);
        case DT_BF16: return launch_linear<DT_BF16>(b, a);
        case DT_F16: return launch_linear<DT_F16>(b, a);
        default: return err_set("one-token product: weights of type %s", dt_name(w->type));
    }
}

int cuda_linear_t(kb_backend *b, float *y, const float *x, const kb_mat *w, const kb_norm *norm)
{
    cuda_state *s = cuda_of(b);
    mv_args a = args_for(y, x, w, NULL, norm, KB_LINEAR, 0, w->cols, w->rows);
    cuda_rounded_forget(b, y);
    if (w->type == DT_Q8)
        return launch_rows_q8(b, a, w->scales, w->rows);
    size_t shared = sizeof(float) * (size_t)w->cols;
    if (shared > 48 * 1024)
        return err_set(
            "the LM head over %d features needs %zu bytes of shared memory; the kernel has 48 KB",
            w->cols, shared);
    unsigned blocks = (unsigned)((w->rows + MT_WARPS * MT_ROWS - 1) / (MT_WARPS * MT_ROWS));
    switch (w->type) {
        case DT_F32:
            linear_t_k<DT_F32><<<blocks, MT_THREADS, shared, s->stream>>>(a, w->rows);
            break;
        case DT_BF16:
            linear_t_k<DT_BF16><<<blocks, MT_THREADS, shared, s->stream>>>(a, w->rows);
            break;
        case DT_F16:
            linear_t_k<DT_F16><<<blocks, MT_THREADS, shared, s->stream>>>(a, w->rows);
            break;
        default: return err_set("LM head: weights of type %s", dt_name(w->type));
    }
    CK_LAUNCH();
    return 0;
}
