/* Causal attention through the cache layout (kernels/kvlayout.h): paged or contiguous, f32, f16,
 * bf16 or int8 rows, the block table read from the device copy the cache manager keeps. One thread block per (query,
 * head): scores in shared memory, softmax, then the weighted sum of values. The CPU twin is
 * kernels/cpu/attention.c. */
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
__global__ static void store_k(kb_kv kv, const float *qkv, int layer, int past, int C)
{
    __shared__ float tmp;
    int t = blockIdx.x, h = blockIdx.y, hd = kv.head_dim;
    const float *src = qkv + (size_t)t * 3 * C + (size_t)h * hd;
    store(kv, layer, 0, h, past + t, src + C, &tmp);
    store(kv, layer, 1, h, past + t, src + 2 * C, &tmp);
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

/* grid (n, heads), dynamic shared memory: scores for every visible key */
__global__ static void attend_k(float *y, const float *qkv, kb_kv kv, int layer, int past, int C, float scale)
{
    extern __shared__ float s[];
    __shared__ float red[32];
    int t = blockIdx.x, h = blockIdx.y, hd = kv.head_dim, len = past + t + 1;
    const float *q = qkv + (size_t)t * 3 * C + (size_t)h * hd;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const void *k = kvl_row(&kv, layer, 0, h, j);
        float d = 0;
        for (int c = 0; c < hd; c++)
            d += q[c] * cu_load(k, c, kv.type);
        if (kv.type == DT_I8)
            d *= *kvl_scale(&kv, layer, 0, h, j);
        s[j] = d * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = block_reduce(mx, red, 1);
    float sum = 0;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        s[j] = __expf(s[j] - mx);
        sum += s[j];
    }
    sum = block_reduce(sum, red, 0);
    __syncthreads();
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float o = 0;
        for (int j = 0; j < len; j++) {
            float v = cu_load(kvl_row(&kv, layer, 1, h, j), c, kv.type);
            if (kv.type == DT_I8)
                v *= *kvl_scale(&kv, layer, 1, h, j);
            o += s[j] * v;
        }
        y[(size_t)t * C + (size_t)h * hd + c] = o / sum;
    }
}

int cuda_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past, int n)
{
    cuda_state *st = cuda_of(b);
    int T = past + n, C = kv->n_head * kv->head_dim, blocks = (T + kv->block_tokens - 1) / kv->block_tokens;
    size_t shared = sizeof(float) * (size_t)T;
    if (shared > (size_t)st->prop.sharedMemPerBlockOptin)
        return err_set("attention over %d positions needs %zu bytes of shared memory; this GPU has %zu", T, shared,
                       (size_t)st->prop.sharedMemPerBlockOptin);
    kb_kv dkv = *kv;
    if (kv->dev_table) { /* the cache manager keeps it current on the device */
        dkv.table = kv->dev_table;
    } else { /* a view made without the cache manager (the twin tests) */
        void *table;
        if (cuda_scratch(b, sizeof(int) * (size_t)blocks, &table))
            return -1;
        CK(cudaMemcpy(table, kv->table, sizeof(int) * (size_t)blocks, cudaMemcpyHostToDevice));
        dkv.table = (const int *)table;
    }
    store_k<<<dim3(n, kv->n_head), 64>>>(dkv, qkv, layer, past, C);
    CK_LAUNCH();
    if (shared > 48 * 1024)
        CK(cudaFuncSetAttribute(attend_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    attend_k<<<dim3(n, kv->n_head), 128, shared>>>(y, qkv, dkv, layer, past, C, 1.0f / sqrtf((float)kv->head_dim));
    CK_LAUNCH();
    return 0;
}
