/* Causal attention through the cache layout (kernels/kvlayout.h): paged or contiguous, f32, f16,
 * bf16 or int8 rows, the block table read from the device copy the cache manager keeps, the length
 * from the step's scalars in device memory. The CPU twin is kernels/cpu/attention.c.
 *   prefill (many queries): one thread block per (query, head), scores in shared memory;
 *   decode (one query): the context split into chunks, one block per (head, chunk) with its own max,
 *   sum and weighted values, then a reduction per head; the grid is sized by the most positions the
 *   cache can hold, so one recorded launch serves every length (chunks past the end return at once). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "common.cuh"

__device__ static void store(const kb_kv kv, int layer, int which, int head, int pos, const float *src, float *scale_tmp)
{
    int hd = kv.head_dim;
    void *dst = kvl_row(&kv, layer, which, head, pos);
    if (kv.type == DT_F32) {
        for (int c = threadIdx.x; c < hd; c += blockDim.x)
            ((float *)dst)[c] = src[c];
    } else if (kv.type == DT_F16) {
        for (int c = threadIdx.x; c < hd; c += blockDim.x)
            ((__half *)dst)[c] = __float2half_rn(src[c]);
    } else if (kv.type == DT_BF16) {
        for (int c = threadIdx.x; c < hd; c += blockDim.x)
            ((__nv_bfloat16 *)dst)[c] = __float2bfloat16_rn(src[c]);
    } else {
        if (threadIdx.x == 0) {
            float mx = 0;
            for (int c = 0; c < hd; c++)
                mx = fmaxf(mx, fabsf(src[c]));
            *scale_tmp = mx;
            *kvl_scale(&kv, layer, which, head, pos) = mx / 127.0f;
        }
        __syncthreads();
        float inv = *scale_tmp > 0 ? 127.0f / *scale_tmp : 0;
        for (int c = threadIdx.x; c < hd; c += blockDim.x)
            ((signed char *)dst)[c] = (signed char)rintf(src[c] * inv);
        __syncthreads();
    }
}

/* grid (n, heads): the new tokens' keys and values into the cache */
__global__ static void store_k(kb_kv kv, const float *qkv, int layer, const cu_step *st, int C)
{
    __shared__ float tmp;
    int t = blockIdx.x, h = blockIdx.y, hd = kv.head_dim;
    const float *src = qkv + (size_t)t * 3 * C + (size_t)h * hd;
    store(kv, layer, 0, h, st->past + t, src + C, &tmp);
    store(kv, layer, 1, h, st->past + t, src + 2 * C, &tmp);
}

__device__ static float block_reduce(float v, float *red, int is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < (int)blockDim.x / 32; w++)
        r = is_max ? fmaxf(r, red[w]) : r + red[w];
    return r;
}

__device__ static float key_dot(const kb_kv &kv, const float *q, int layer, int h, int j)
{
    const void *k = kvl_row(&kv, layer, 0, h, j);
    float d = 0;
    for (int c = 0; c < kv.head_dim; c++)
        d += q[c] * cu_load(k, c, kv.type);
    return kv.type == DT_I8 ? d * *kvl_scale(&kv, layer, 0, h, j) : d;
}

__device__ static float value_at(const kb_kv &kv, int layer, int h, int j, int c)
{
    float v = cu_load(kvl_row(&kv, layer, 1, h, j), c, kv.type);
    return kv.type == DT_I8 ? v * *kvl_scale(&kv, layer, 1, h, j) : v;
}

/* Scores of positions [from, to) for query q into s[0..), their max and sum of exponentials (s then
 * holds the exponentials), shared by both kernels. */
__device__ static void softmax_part(float *s, float *red, const kb_kv &kv, const float *q, int layer, int h, int from, int to,
                                    float scale, float *mx_out, float *sum_out)
{
    float mx = -INFINITY;
    for (int j = from + threadIdx.x; j < to; j += blockDim.x) {
        float d = key_dot(kv, q, layer, h, j) * scale;
        s[j - from] = d;
        mx = fmaxf(mx, d);
    }
    mx = block_reduce(mx, red, 1);
    float sum = 0;
    for (int j = from + threadIdx.x; j < to; j += blockDim.x) {
        s[j - from] = __expf(s[j - from] - mx);
        sum += s[j - from];
    }
    *sum_out = block_reduce(sum, red, 0);
    *mx_out = mx;
    __syncthreads();
}

/* prefill: grid (n, heads), dynamic shared memory for every visible key */
__global__ static void attend_k(float *y, const float *qkv, kb_kv kv, int layer, const cu_step *st, int C, float scale)
{
    extern __shared__ float s[];
    __shared__ float red[32];
    int t = blockIdx.x, h = blockIdx.y, hd = kv.head_dim, len = st->past + t + 1;
    const float *q = qkv + (size_t)t * 3 * C + (size_t)h * hd;
    float mx, sum;
    softmax_part(s, red, kv, q, layer, h, 0, len, scale, &mx, &sum);
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float o = 0;
        for (int j = 0; j < len; j++)
            o += s[j] * value_at(kv, layer, h, j, c);
        y[(size_t)t * C + (size_t)h * hd + c] = o / sum;
    }
}

enum { CHUNK = 128 };

/* decode, part 1: grid (heads, chunks); partials per (head, chunk): max, sum, then head_dim outputs.
 * The block whose chunk holds the new position stores its head's key and value first (no separate
 * launch: no other block reads them). */
__global__ static void attend_split_k(float *part, const float *qkv, kb_kv kv, int layer, const cu_step *st, int C, float scale)
{
    __shared__ float s[CHUNK];
    __shared__ float red[32];
    int h = blockIdx.x, chunk = blockIdx.y, hd = kv.head_dim, len = st->past + 1;
    int from = chunk * CHUNK, to = min(len, from + CHUNK);
    float *out = part + ((size_t)h * gridDim.y + chunk) * (hd + 2);
    if (from >= len) {
        if (threadIdx.x == 0) {
            out[0] = -INFINITY;
            out[1] = 0;
        }
        return;
    }
    if (to == len) {
        const float *src = qkv + (size_t)h * hd;
        store(kv, layer, 0, h, st->past, src + C, &red[0]);
        store(kv, layer, 1, h, st->past, src + 2 * C, &red[0]);
        __syncthreads();
    }
    float mx, sum;
    softmax_part(s, red, kv, qkv + (size_t)h * hd, layer, h, from, to, scale, &mx, &sum);
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float o = 0;
        for (int j = from; j < to; j++)
            o += s[j - from] * value_at(kv, layer, h, j, c);
        out[2 + c] = o;
    }
    if (threadIdx.x == 0) {
        out[0] = mx;
        out[1] = sum;
    }
}

/* decode, part 2: grid (heads), the chunks rescaled to one max and summed */
__global__ static void attend_reduce_k(float *y, const float *part, int chunks, int hd)
{
    int h = blockIdx.x;
    const float *p = part + (size_t)h * chunks * (hd + 2);
    float mx = -INFINITY;
    for (int k = 0; k < chunks; k++)
        mx = fmaxf(mx, p[(size_t)k * (hd + 2)]);
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float sum = 0, o = 0;
        for (int k = 0; k < chunks; k++) {
            const float *pk = p + (size_t)k * (hd + 2);
            if (pk[1] == 0)
                continue;
            float w = __expf(pk[0] - mx);
            sum += pk[1] * w;
            o += pk[2 + c] * w;
        }
        y[(size_t)h * hd + c] = o / sum;
    }
}

int cuda_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past, int n)
{
    cuda_state *st = cuda_of(b);
    cudaStream_t stream = st->stream;
    int T = past + n, C = kv->n_head * kv->head_dim, hd = kv->head_dim;
    float scale = 1.0f / sqrtf((float)hd);
    const cu_step *step;
    if (cuda_step_args(b, NULL, 0, past, NULL, &step))
        return -1;
    kb_kv dkv = *kv;
    if (kv->dev_table) { /* the cache manager keeps it current on the device */
        dkv.table = kv->dev_table;
    } else { /* a view made without the cache manager (the twin tests) */
        int blocks = (T + kv->block_tokens - 1) / kv->block_tokens;
        void *table;
        if (cuda_scratch(b, sizeof(int) * (size_t)blocks, &table))
            return -1;
        CK(cudaMemcpyAsync(table, kv->table, sizeof(int) * (size_t)blocks, cudaMemcpyHostToDevice, stream));
        dkv.table = (const int *)table;
    }
    if (n == 1) {
        int most = kv->max_tokens > T ? kv->max_tokens : T, chunks = (most + CHUNK - 1) / CHUNK;
        if (cuda_grow(b, (void **)&st->partials, &st->partial_bytes, sizeof(float) * (size_t)kv->n_head * chunks * (hd + 2)))
            return -1;
        attend_split_k<<<dim3(kv->n_head, chunks), 128, 0, stream>>>(st->partials, qkv, dkv, layer, step, C, scale);
        CK_LAUNCH();
        attend_reduce_k<<<kv->n_head, hd < 128 ? 64 : 128, 0, stream>>>(y, st->partials, chunks, hd);
        CK_LAUNCH();
        return 0;
    }
    size_t shared = sizeof(float) * (size_t)T;
    if (shared > (size_t)st->prop.sharedMemPerBlockOptin)
        return err_set("attention over %d positions needs %zu bytes of shared memory; this GPU has %zu", T, shared,
                       (size_t)st->prop.sharedMemPerBlockOptin);
    store_k<<<dim3(n, kv->n_head), 64, 0, stream>>>(dkv, qkv, layer, step, C);
    CK_LAUNCH();
    if (shared > 48 * 1024)
        CK(cudaFuncSetAttribute(attend_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    attend_k<<<dim3(n, kv->n_head), 128, shared, stream>>>(y, qkv, dkv, layer, step, C, scale);
    CK_LAUNCH();
    return 0;
}
