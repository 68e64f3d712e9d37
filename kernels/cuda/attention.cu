/* Causal attention through the cache layout (kernels/kvlayout.h): paged or contiguous, f32, f16,
 * bf16 or int8 rows, the block table read from the device copy the cache manager keeps, the length
 * from the step's scalars in device memory. The CPU twin is kernels/cpu/attention.c.
 *   prefill (many queries): one thread block per (query, head), scores in shared memory;
 *   decode (one query): the context split into chunks, one block per (head, chunk) with its own max,
 *   sum and weighted values, reduced per head by the last of its blocks; the grid is sized by the
 *   most positions the cache can hold, so one recorded launch serves every length (chunks past the
 *   end only report that they are empty). */
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
__global__ static void attend_k(float *y, cu_rounded y16, const float *qkv, kb_kv kv, int layer, const cu_step *st, int C,
                                float scale)
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
        size_t i = (size_t)t * C + (size_t)h * hd + c;
        y[i] = o / sum;
        y16.bf[i] = __float2bfloat16_rn(y[i]);
        y16.h[i] = __float2half_rn(y[i]);
    }
}

enum { CHUNK = 128 };

/* Decode: grid (heads, chunks). Each block leaves its chunk's max, sum of exponentials and weighted
 * values as a partial; the last block of a head to finish (a counter per head, reset by that block
 * for the next step) rescales the partials to one max and writes the head's output. The block whose
 * chunk holds the new position stores its head's key and value first: no other block reads them. */
__global__ static void attend_decode_k(float *y, cu_rounded y16, float *part, unsigned *done, const float *qkv, kb_kv kv,
                                       int layer, const cu_step *st, int C, float scale)
{
    __shared__ float s[CHUNK];
    __shared__ float red[32];
    __shared__ int last;
    int h = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y, hd = kv.head_dim, len = st->past + 1;
    int from = chunk * CHUNK, to = min(len, from + CHUNK);
    float *out = part + ((size_t)h * chunks + chunk) * (hd + 2), mx = -INFINITY, sum = 0;
    if (from < len) {
        if (to == len) {
            const float *src = qkv + (size_t)h * hd;
            store(kv, layer, 0, h, st->past, src + C, &red[0]);
            store(kv, layer, 1, h, st->past, src + 2 * C, &red[0]);
            __syncthreads();
        }
        softmax_part(s, red, kv, qkv + (size_t)h * hd, layer, h, from, to, scale, &mx, &sum);
        for (int c = threadIdx.x; c < hd; c += blockDim.x) {
            float o = 0;
            for (int j = from; j < to; j++)
                o += s[j - from] * value_at(kv, layer, h, j, c);
            out[2 + c] = o;
        }
    }
    if (threadIdx.x == 0) {
        out[0] = mx;
        out[1] = sum;
    }
    __threadfence(); /* the partial is visible to every block before the count says so */
    __syncthreads();
    if (threadIdx.x == 0)
        last = atomicAdd(&done[h], 1u) == (unsigned)chunks - 1;
    __syncthreads();
    if (!last)
        return;
    const float *p = part + (size_t)h * chunks * (hd + 2);
    float m = -INFINITY;
    for (int k = 0; k < chunks; k++)
        m = fmaxf(m, __ldcg(p + (size_t)k * (hd + 2)));
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float total = 0, o = 0;
        for (int k = 0; k < chunks; k++) {
            const float *pk = p + (size_t)k * (hd + 2);
            float ks = __ldcg(pk + 1);
            if (ks == 0)
                continue;
            float w = __expf(__ldcg(pk) - m);
            total += ks * w;
            o += __ldcg(pk + 2 + c) * w;
        }
        size_t i = (size_t)h * hd + c;
        y[i] = o / total;
        y16.bf[i] = __float2bfloat16_rn(y[i]);
        y16.h[i] = __float2half_rn(y[i]);
    }
    if (threadIdx.x == 0)
        done[h] = 0;
}

enum { MAX_HEADS = 1024 };

/* A counter per head (zero between steps: each step's last block resets its head's), then the
 * decode partials. */
static int decode_buffers(kb_backend *b, int heads, size_t part_bytes, unsigned **done, float **part)
{
    cuda_state *st = cuda_of(b);
    if (heads > MAX_HEADS)
        return err_set("%d attention heads; the decode kernel counts at most %d", heads, MAX_HEADS);
    size_t bytes = sizeof(unsigned) * MAX_HEADS + part_bytes;
    if (bytes > st->partial_bytes) {
        if (cuda_grow(b, (void **)&st->partials, &st->partial_bytes, bytes))
            return -1;
        CK(cudaMemsetAsync(st->partials, 0, sizeof(unsigned) * MAX_HEADS, st->stream));
    }
    *done = (unsigned *)st->partials;
    *part = (float *)((unsigned *)st->partials + MAX_HEADS);
    return 0;
}

int cuda_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past, int n)
{
    cuda_state *st = cuda_of(b);
    cudaStream_t stream = st->stream;
    int T = past + n, C = kv->n_head * kv->head_dim, hd = kv->head_dim;
    float scale = 1.0f / sqrtf((float)hd);
    const cu_step *step;
    cu_rounded y16;
    if (cuda_step_args(b, NULL, 0, past, NULL, &step) || cuda_rounded_out(b, y, (size_t)n * C, &y16))
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
        unsigned *done = NULL;
        float *part = NULL;
        if (decode_buffers(b, kv->n_head, sizeof(float) * (size_t)kv->n_head * chunks * (hd + 2), &done, &part))
            return -1;
        attend_decode_k<<<dim3(kv->n_head, chunks), CHUNK, 0, stream>>>(y, y16, part, done, qkv, dkv, layer, step, C, scale);
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
    attend_k<<<dim3(n, kv->n_head), 128, shared, stream>>>(y, y16, qkv, dkv, layer, step, C, scale);
    CK_LAUNCH();
    return 0;
}
