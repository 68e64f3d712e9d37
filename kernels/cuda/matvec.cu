/* The fused products of a decode step and of a verify pass (backend.h's linear and linear_t: one
 * token, or up to CU_TOKENS, each computed bit for bit as it would be alone, with the same
 * reduction order and the same slices), in place of cuBLASLt's small GEMMs and the kernels around
 * them. Each weight is read once with 16-byte loads, for all the tokens of a launch; the layernorm
 * is applied on the way in (every block recomputes the row's mean and variance: a few KB from L2)
 * and the bias, GELU or residual add on the way out. x stays f32 in
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
    float *y;                         /* [tokens, N] */
    const float *x, *bias, *g, *beta; /* x [tokens, K]; g NULL: no layernorm */
    const void *w;
    float eps;
    int K, N, slice_rows, act, residual, vec;
    float *part;     /* [tokens, slices, N] partial sums */
    unsigned *count; /* per tile: blocks arrived (the last resets it) */
} mv_args;

enum {
    MV_THREADS = 256,
    MV_LANES = 8,
    MV_ROWS = MV_THREADS / MV_LANES,
    MV_MAX_SLICE = 8192,
    MV_COUNTERS = 4096
};

/* token t's output j */
__device__ static void finish(const mv_args &a, int t, int j, float v)
{
    float *y = a.y + (size_t)t * a.N;
    if (a.bias)
        v += a.bias[j];
    if (a.act == KB_GELU)
        v = cu_gelu(v);
    y[j] = a.residual ? y[j] + v : v;
}

/* xs[0..k1 - k0) = token t's inputs k0..k1, normalised when the product has a norm (its statistics
 * over all K), and rounded to bf16 against bf16 weights (the CPU twin's definition of that product:
 * kernels/cpu/matmul_bf16.c); red: 32 floats of shared memory. Every thread calls it; xs is ready
 * when it returns. */
template <dtype T>
__device__ static void load_input(const mv_args &a, int t, float *xs, int k0, int k1, float *red)
{
    const float *x = a.x + (size_t)t * a.K;
    float mean = 0, rstd = 1;
    if (a.g)
        row_stats(x, a.K, a.eps, red, &mean, &rstd);
    for (int k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
        float v = a.g ? (x[k] - mean) * rstd * a.g[k] + a.beta[k] : x[k];
        xs[k - k0] = T == DT_BF16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
    }
    __syncthreads();
}

enum { MT_THREADS = 256, MT_WARPS = MT_THREADS / 32, MT_ROWS = 8 };

/* whether token t of a launch of n exists (NT = 1: always, the decode step's code unchanged) */
template <int NT>
__device__ __forceinline__ int has(int t, int n)
{
    return NT == 1 || t < n;
}

/* each lane's partial sums of a warp's MT_ROWS outputs from v0 for token t, summed over the warp
 * and finished */
__device__ static void rows_out(const mv_args &a, int t, const float *acc, int v0, int V)
{
#pragma unroll
    for (int q = 0; q < MT_ROWS; q++) {
        float s = acc[q];
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x % 32 == 0 && v0 + q < V)
            finish(a, t, v0 + q, s);
    }
}

/* grid (tiles of MV_LANES * E columns, slices of slice_rows rows), n <= NT tokens */
template <dtype T, int NT>
__global__ static void __launch_bounds__(MV_THREADS) linear_k(mv_args a, int n)
{
    enum { E = cu_vec<T>::E, TN = MV_LANES * E };
    extern __shared__ float xs[]; /* each token's slice of input rows, normalised */
    __shared__ float sums[MV_ROWS * TN], red[32];
    __shared__ int last;
    int tid = threadIdx.x, lane = tid % MV_LANES, r = tid / MV_LANES, slices = gridDim.y;
    int k0 = blockIdx.y * a.slice_rows, k1 = min(a.K, k0 + a.slice_rows),
        col = blockIdx.x * TN + lane * E, rows = a.slice_rows;
    for (int t = 0; t < NT; t++)
        if (has<NT>(t, n))
            load_input<T>(a, t, xs + t * rows, k0, k1, red);
    float acc[NT][E];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[t][e] = 0;
    if (col < a.N) {
        int valid = min(E, a.N - col), k = k0 + r;
        /* four loads in flight before their products */
        for (; k + 3 * MV_ROWS < k1; k += 4 * MV_ROWS) {
            float w[4][E];
#pragma unroll
            for (int u = 0; u < 4; u++)
                load_w<T>(a.w, (size_t)(k + u * MV_ROWS) * a.N + col, a.vec, valid, w[u]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (!has<NT>(t, n))
                        continue;
                    float xv = xs[t * rows + k + u * MV_ROWS - k0];
#pragma unroll
                    for (int e = 0; e < E; e++)
                        acc[t][e] += xv * w[u][e];
                }
        }
        for (; k < k1; k += MV_ROWS) {
            float w[E];
            load_w<T>(a.w, (size_t)k * a.N + col, a.vec, valid, w);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (!has<NT>(t, n))
                    continue;
                float xv = xs[t * rows + k - k0];
#pragma unroll
                for (int e = 0; e < E; e++)
                    acc[t][e] += xv * w[e];
            }
        }
    }
    int j = blockIdx.x * TN + tid;
    float s[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) { /* the tokens' sums over the block's rows, one at a time */
        s[t] = 0;
        if (!has<NT>(t, n))
            continue;
        if (t > 0)
            __syncthreads(); /* the previous token's sums are read */
#pragma unroll
        for (int e = 0; e < E; e++)
            sums[r * TN + lane * E + e] = acc[t][e];
        __syncthreads();
        if (tid < TN)
            for (int q = 0; q < MV_ROWS; q++)
                s[t] += sums[q * TN + tid];
    }
    if (slices == 1) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (has<NT>(t, n) && tid < TN && j < a.N)
                finish(a, t, j, s[t]);
        return;
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        if (has<NT>(t, n) && tid < TN && j < a.N)
            a.part[((size_t)t * slices + blockIdx.y) * a.N + j] = s[t];
    if (!cu_last_block(&a.count[blockIdx.x], (unsigned)slices, &last))
        return;
    for (int t = 0; t < n; t++)
        if (tid < TN && j < a.N) {
            float total = 0;
            for (int q = 0; q < slices; q++)
                total += __ldcg(a.part + ((size_t)t * slices + q) * a.N + j);
            finish(a, t, j, total);
        }
}

/* grid (rows / (MT_WARPS * MT_ROWS)): y[t][v] = norm(x[t]) . W[v, :] for n <= NT tokens */
template <dtype T, int NT>
__global__ static void __launch_bounds__(MT_THREADS) linear_t_k(mv_args a, int V, int n)
{
    enum { E = cu_vec<T>::E };
    extern __shared__ float xs[]; /* each token's K inputs, normalised */
    __shared__ float red[32];
    int lane = threadIdx.x % 32, v0 = (blockIdx.x * MT_WARPS + threadIdx.x / 32) * MT_ROWS;
    for (int t = 0; t < NT; t++)
        if (has<NT>(t, n))
            load_input<T>(a, t, xs + (size_t)t * a.K, 0, a.K, red);
    float acc[NT][MT_ROWS];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int q = 0; q < MT_ROWS; q++)
            acc[t][q] = 0;
    for (int k = lane * E; k < a.K; k += 32 * E) {
        int valid = min(E, a.K - k);
#pragma unroll
        for (int q = 0; q < MT_ROWS; q++) {
            float w[E];
            if (v0 + q < V) {
                load_w<T>(a.w, (size_t)(v0 + q) * a.K + k, a.vec, valid, w);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (!has<NT>(t, n))
                        continue;
                    const float *xt = xs + (size_t)t * a.K;
#pragma unroll
                    for (int e = 0; e < E; e++) /* w[e] is 0 past the end */
                        acc[t][q] += xt[k + e < a.K ? k + e : 0] * w[e];
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        if (has<NT>(t, n))
            rows_out(a, t, acc[t], v0, V); /* the LM head: no bias, act or residual */
}

/* q8 and q4 weights (stored along the reduction: each output's K values are one row) through the
 * same rows as linear_t_k, as the CPU twin computes them: the input is quantised per block of 32
 * (d = max|x| / 127, q = round(x / d), the same float operations) and dp4a makes each block's
 * integer dot exact. q8: a lane takes 16 bytes of a row (half a block), each half scaled by both
 * blocks' scales. q4: a lane takes a block's 16 bytes, the nibbles (q, 0..15) as they are against
 * the inputs, less 8 times the block's input sum; q6 (the LM head of q4 weights) a block's 24
 * bytes, three bytes cut into four values (0..63) at a time, less 32 times the sum. The epilogue
 * of linear (bias, GELU, residual) follows; with none of those it is the LM head. */
template <int NT, dtype W>
__global__ static void __launch_bounds__(MT_THREADS)
    rows_quant_k(mv_args a, const uint16_t *scales, int V, int n)
{
    /* K inputs of one token, normalised; then each token's K int8, K / 32 scales, K / 32 sums */
    extern __shared__ float xs[];
    __shared__ float red[32];
    int K = a.K, blocks = K / DT_Q8_BLOCK, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int v0 = (blockIdx.x * MT_WARPS + warp) * MT_ROWS;
    signed char *xq = (signed char *)(xs + K);
    float *xd = xs + K + (size_t)n * K / 4;
    int *xsum = (int *)(xd + (size_t)n * blocks);
    for (int t = 0; t < NT; t++) {
        if (!has<NT>(t, n))
            continue;
        load_input<DT_Q8>(a, t, xs, 0, K, red);
        for (int b = warp; b < blocks; b += MT_WARPS) { /* a warp a block: lane i holds element i */
            float v = xs[b * DT_Q8_BLOCK + lane], amax = fabsf(v);
            for (int o = 16; o > 0; o >>= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
            int qv = (int)roundf(v * inv), sum = qv;
            xq[(size_t)t * K + b * DT_Q8_BLOCK + lane] = (signed char)qv;
            for (int o = 16; o > 0; o >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                xd[t * blocks + b] = d;
                xsum[t * blocks + b] = sum;
            }
        }
        __syncthreads(); /* and xs is free for the next token */
    }
    float acc[NT][MT_ROWS];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int q = 0; q < MT_ROWS; q++)
            acc[t][q] = 0;
    /* a lane's values: one load of 16 bytes (q8, q4), or a block's 24 (q6) */
    enum { SPAN = W == DT_Q8 ? 16 : DT_Q4_BLOCK };
    for (int k = lane * SPAN; k < K; k += 32 * SPAN) {
        int b = k / DT_Q8_BLOCK;
#pragma unroll
        for (int q = 0; q < MT_ROWS; q++) {
            if (v0 + q >= V)
                continue;
            const unsigned char *at =
                (const unsigned char *)a.w + dt_bytes(W, (size_t)(v0 + q) * K + k);
            uint4 w;
            unsigned f6[8];             /* q6: values 4r..4r + 3 (bits 24r..24r + 23) a byte each */
            if constexpr (W == DT_Q6) { /* 8-byte aligned: rows and blocks are 24 bytes apart */
                unsigned long long h[3];
#pragma unroll
                for (int i = 0; i < 3; i++) {
                    uint2 p = __ldg((const uint2 *)at + i);
                    h[i] = p.x | (unsigned long long)p.y << 32;
                }
#pragma unroll
                for (int r = 0; r < 8; r++) {
                    int bit = 24 * r % 64;
                    unsigned long long v = h[24 * r / 64] >> bit;
                    if (bit > 40)
                        v |= h[24 * r / 64 + 1] << (64 - bit);
                    unsigned u = (unsigned)v;
                    f6[r] =
                        (u & 63) | (u >> 6 & 63) << 8 | (u >> 12 & 63) << 16 | (u >> 18 & 63) << 24;
                }
            } else {
                w = __ldg((const uint4 *)at);
            }
            float dw = __half2float(__ushort_as_half(scales[(size_t)(v0 + q) * blocks + b]));
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (!has<NT>(t, n))
                    continue;
                const int *xw = (const int *)(xq + (size_t)t * K + k);
                int dot;
                if constexpr (W == DT_Q6) {
                    dot = -32 * xsum[t * blocks + b];
#pragma unroll
                    for (int r = 0; r < 8; r++)
                        dot = __dp4a((int)f6[r], xw[r], dot);
                } else if constexpr (W == DT_Q4) { /* bytes j: values j (low nibble) and j + 16 */
                    const unsigned lo = 0x0f0f0f0fu, u[4] = {w.x, w.y, w.z, w.w};
                    dot = -8 * xsum[t * blocks + b];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        dot = __dp4a((int)(u[i] & lo), xw[i], dot);
                        dot = __dp4a((int)((u[i] >> 4) & lo), xw[4 + i], dot);
                    }
                } else {
                    dot = __dp4a((int)w.x, xw[0], 0);
                    dot = __dp4a((int)w.y, xw[1], dot);
                    dot = __dp4a((int)w.z, xw[2], dot);
                    dot = __dp4a((int)w.w, xw[3], dot);
                }
                acc[t][q] += dw * xd[t * blocks + b] * (float)dot;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        if (has<NT>(t, n))
            rows_out(a, t, acc[t], v0, V);
}

/* The tokens of a product in launches of at most CU_TOKENS, as many as the shared memory holds
 * beside `fixed` bytes at `each` bytes a token: launch(a, n) runs with a.x and a.y at a launch's
 * first token. Each token's result is the same in any grouping. */
template <typename F>
static int in_groups(mv_args a, int n, size_t fixed, size_t each, const char *what, F launch)
{
    if (fixed + each > 48 * 1024)
        return err_set("%s needs %zu bytes of shared memory; the kernel has 48 KB", what,
                       fixed + each);
    size_t most = (48 * 1024 - fixed) / each; /* each > 0: every token has its inputs */
    int group = most < (size_t)CU_TOKENS ? (int)most : (int)CU_TOKENS;
    for (int t0 = 0; t0 < n; t0 += group) {
        mv_args g = a;
        g.x = a.x + (size_t)t0 * a.K;
        g.y = a.y + (size_t)t0 * a.N;
        if (launch(g, n - t0 < group ? n - t0 : group))
            return -1;
    }
    return 0;
}

template <dtype W>
static int launch_rows_quant(kb_backend *b, mv_args a, int n, const uint16_t *scales, int V)
{
    if (a.K % DT_Q8_BLOCK)
        return err_set("a %s product over %d values: the kernel takes multiples of %d", dt_name(W),
                       a.K, DT_Q8_BLOCK);
    unsigned blocks = (unsigned)((V + MT_WARPS * MT_ROWS - 1) / (MT_WARPS * MT_ROWS));
    size_t fixed = sizeof(float) * (size_t)a.K,
           each = (size_t)a.K + 2 * sizeof(float) * (size_t)(a.K / DT_Q8_BLOCK);
    return in_groups(a, n, fixed, each, "a quantised product", [&](mv_args g, int k) {
        size_t shared = fixed + each * (size_t)k;
        if (k == 1)
            rows_quant_k<1, W><<<blocks, MT_THREADS, shared, cuda_stream(b)>>>(g, scales, V, 1);
        else
            rows_quant_k<CU_TOKENS, W>
                <<<blocks, MT_THREADS, shared, cuda_stream(b)>>>(g, scales, V, k);
        CK_LAUNCH();
        return 0;
    });
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
    a.vec = ((size_t)w->data & 15) == 0 && dt_bytes(w->type, (size_t)w->cols) % 16 == 0;
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
static int launch_linear(kb_backend *b, mv_args a, int n)
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
    int group = n < CU_TOKENS ? n : CU_TOKENS;
    if (slices > 1 && mv_buffers(b, (size_t)group * slices * a.N, &a.count, &a.part))
        return -1;
    return in_groups(a, n, 0, sizeof(float) * rows, "a fused product", [&](mv_args g, int k) {
        dim3 grid(tiles, slices);
        if (k == 1)
            linear_k<T, 1><<<grid, MV_THREADS, sizeof(float) * rows, s->stream>>>(g, 1);
        else
            linear_k<T, CU_TOKENS><<<grid, MV_THREADS, sizeof(float) * rows * k, s->stream>>>(g, k);
        CK_LAUNCH();
        return 0;
    });
}

int cuda_linear(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
                const kb_norm *norm, kb_act act, int residual)
{
    mv_args a = args_for(y, x, w, bias, norm, act, residual, w->rows, w->cols);
    cuda_rounded_forget(b, y);
    switch (w->type) {
        case DT_Q8: return launch_rows_quant<DT_Q8>(b, a, n, w->scales, w->cols);
        case DT_Q4: return launch_rows_quant<DT_Q4>(b, a, n, w->scales, w->cols);
        case DT_Q6: return launch_rows_quant<DT_Q6>(b, a, n, w->scales, w->cols);
        case DT_F32: return launch_linear<DT_F32>(b, a, n);
        case DT_BF16: return launch_linear<DT_BF16>(b, a, n);
        case DT_F16: return launch_linear<DT_F16>(b, a, n);
        default: return err_set("fused product: weights of type %s", dt_name(w->type));
    }
}

template <dtype T>
static int launch_linear_t(kb_backend *b, mv_args a, int n, int V)
{
    unsigned blocks = (unsigned)((V + MT_WARPS * MT_ROWS - 1) / (MT_WARPS * MT_ROWS));
    return in_groups(a, n, 0, sizeof(float) * (size_t)a.K, "the LM head", [&](mv_args g, int k) {
        size_t shared = sizeof(float) * (size_t)a.K * k;
        if (k == 1)
            linear_t_k<T, 1><<<blocks, MT_THREADS, shared, cuda_stream(b)>>>(g, V, 1);
        else
            linear_t_k<T, CU_TOKENS><<<blocks, MT_THREADS, shared, cuda_stream(b)>>>(g, V, k);
        CK_LAUNCH();
        return 0;
    });
}

int cuda_linear_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                  const kb_norm *norm)
{
    mv_args a = args_for(y, x, w, NULL, norm, KB_LINEAR, 0, w->cols, w->rows);
    cuda_rounded_forget(b, y);
    switch (w->type) {
        case DT_Q8: return launch_rows_quant<DT_Q8>(b, a, n, w->scales, w->rows);
        case DT_Q4: return launch_rows_quant<DT_Q4>(b, a, n, w->scales, w->rows);
        case DT_Q6: return launch_rows_quant<DT_Q6>(b, a, n, w->scales, w->rows);
        case DT_F32: return launch_linear_t<DT_F32>(b, a, n, w->rows);
        case DT_BF16: return launch_linear_t<DT_BF16>(b, a, n, w->rows);
        case DT_F16: return launch_linear_t<DT_F16>(b, a, n, w->rows);
        default: return err_set("LM head: weights of type %s", dt_name(w->type));
    }
}
