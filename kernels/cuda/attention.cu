/* Causal attention through the cache layout (kernels/kvlayout.h): paged or contiguous, f32, f16,
 * bf16, int8 or q4 rows (q4 through the element-wise kernels only: the basic decode kernel serves
 * it in the fast set too), the block table read from the device copy the cache manager keeps, the
 * length from the step's scalars in device memory. The CPU twin is kernels/cpu/attention.c.
 *   prefill (many queries): tiles of queries against tiles of keys in shared memory with an online
 *   softmax (head dims 16, 32, 64), else one block per (query, head) with every score in shared
 * memory; decode (one query): the context split into chunks, one block per (head, chunk) with its
 * own max, sum and weighted values, reduced per head by the last of its blocks; the grid is sized
 * by the most positions the cache can hold, so one recorded launch serves every length (chunks past
 * the end only report that they are empty). A pass of a few queries (a verify pass, up to
 * CU_TOKENS, fast set) runs the decode kernel once per query in the grid's third dimension, after
 * one launch has stored their keys and values: each query's output is the decode step's bit for
 * bit (empty chunks add nothing and take nothing from the max). The fast kernel set decodes in
 * the flash-decoding layout (attend_flash_k); the basic set keeps the previous release's kernel
 * (attend_decode_k). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

#include "common.cuh"

/* element c of a q4 row with its block scales */
__device__ __forceinline__ float q4_value(const void *row, const void *scales, int c)
{
    unsigned char v = ((const unsigned char *)row)[c / DT_Q4_BLOCK * 16 + c % 16];
    float d = __half2float(__ushort_as_half(((const uint16_t *)scales)[c / DT_Q4_BLOCK]));
    return (float)((c % DT_Q4_BLOCK < 16 ? v & 15 : v >> 4) - 8) * d;
}

__device__ static void store(const kb_kv kv, int layer, int which, int head, int pos,
                             const float *src, float *scale_tmp)
{
    int hd = kv.head_dim;
    void *dst = kvl_row(&kv, layer, which, head, pos);
    if (kv.type == DT_Q4) {
        for (int b = threadIdx.x; b < hd / DT_Q4_BLOCK; b += blockDim.x)
            dt_q4_block((uint8_t *)dst + b * DT_Q4_BLOCK / 2,
                        (uint16_t *)kvl_scales(&kv, layer, which, head, pos) + b,
                        src + b * DT_Q4_BLOCK);
        __syncthreads();
    } else if (kv.type == DT_F32) {
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
    if (kv.type == DT_Q4) {
        const void *sc = kvl_scales(&kv, layer, 0, h, j);
        for (int c = 0; c < kv.head_dim; c++)
            d += q[c] * q4_value(k, sc, c);
        return d;
    }
    for (int c = 0; c < kv.head_dim; c++)
        d += q[c] * cu_load(k, c, kv.type);
    return kv.type == DT_I8 ? d * *kvl_scale(&kv, layer, 0, h, j) : d;
}

/* element c of a cached key (which = 0) or value (1), widened and scaled */
__device__ static float value_of(const kb_kv &kv, int layer, int which, int h, int j, int c)
{
    const void *row = kvl_row(&kv, layer, which, h, j);
    if (kv.type == DT_Q4)
        return q4_value(row, kvl_scales(&kv, layer, which, h, j), c);
    float v = cu_load(row, c, kv.type);
    return kv.type == DT_I8 ? v * *kvl_scale(&kv, layer, which, h, j) : v;
}

/* Scores of positions [from, to) for query q into s[0..), their max and sum of exponentials (s then
 * holds the exponentials), shared by both kernels. */
__device__ static void softmax_part(float *s, float *red, const kb_kv &kv, const float *q,
                                    int layer, int h, int from, int to, float scale, float *mx_out,
                                    float *sum_out)
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

/* prefill for other head dims: grid (n, heads), dynamic shared memory for every visible key */
__global__ static void attend_k(float *y, cu_rounded y16, const float *qkv, kb_kv kv, int layer,
                                const cu_step *st, int C, float scale)
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
            o += s[j] * value_of(kv, layer, 1, h, j, c);
        cu_put(y, y16, (size_t)t * C + (size_t)h * hd + c, o / sum);
    }
}

/* prefill, tiled (head dims of 16, 32 or 64: GPT-2's is 64): grid (query tiles, heads). A block
 * holds QT queries and walks the keys they see in tiles of KT through shared memory, keeping per
 * query a running max, sum and weighted values (the online softmax), so each key and value is read
 * once per tile of queries instead of once per query. Four threads share a query: each scores every
 * fourth key of a tile and owns every fourth output column. */
enum { QT = 32, KT = 32, PREFILL_THREADS = QT * 4 };

template <int HD>
__global__ static void __launch_bounds__(PREFILL_THREADS)
    attend_tiled_k(float *y, cu_rounded y16, const float *qkv, kb_kv kv, int layer,
                   const cu_step *st, int n, int C, float scale)
{
    __shared__ float q[QT][HD + 1], k[KT][HD + 1], v[KT][HD + 1];
    int h = blockIdx.y, t0 = blockIdx.x * QT, rows = min(QT, n - t0), past = st->past;
    int tid = threadIdx.x, qi = tid / 4, r = tid % 4, group = (tid % 32) & ~3;
    for (int i = tid; i < QT * HD; i += blockDim.x) {
        int a = i / HD, c = i % HD;
        q[a][c] = a < rows ? qkv[(size_t)(t0 + a) * 3 * C + (size_t)h * HD + c] * scale : 0.0f;
    }
    float o[HD / 4], m = -INFINITY, l = 0;
#pragma unroll
    for (int ci = 0; ci < HD / 4; ci++)
        o[ci] = 0;
    int qpos = past + t0 + qi, last = past + t0 + rows - 1;
    for (int k0 = 0; k0 <= last; k0 += KT) {
        int kn = min(KT, last + 1 - k0);
        __syncthreads(); /* the previous tile is no longer read */
        for (int i = tid; i < KT * HD; i += blockDim.x) {
            int a = i / HD, c = i % HD;
            k[a][c] = a < kn ? value_of(kv, layer, 0, h, k0 + a, c) : 0.0f;
            v[a][c] = a < kn ? value_of(kv, layer, 1, h, k0 + a, c) : 0.0f;
        }
        __syncthreads();
        float s[KT / 4], top = -INFINITY;
#pragma unroll
        for (int i = 0; i < KT / 4; i++) {
            int j = r + 4 * i;
            float d = -INFINITY;
            if (qi < rows && j < kn && k0 + j <= qpos) {
                d = 0;
#pragma unroll
                for (int c = 0; c < HD; c++)
                    d += q[qi][c] * k[j][c];
            }
            s[i] = d;
            top = fmaxf(top, d);
        }
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
        float m_new = fmaxf(m, top),
              base = m_new == -INFINITY ? 0.0f : m_new; /* nothing visible yet: all stay 0 */
        float corr = __expf(m - base), psum = 0;
#pragma unroll
        for (int i = 0; i < KT / 4; i++) {
            s[i] = __expf(s[i] - base);
            psum += s[i];
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        psum += __shfl_xor_sync(0xffffffffu, psum, 2);
        l = l * corr + psum;
        m = m_new;
#pragma unroll
        for (int ci = 0; ci < HD / 4; ci++)
            o[ci] *= corr;
#pragma unroll
        for (int i = 0; i < KT / 4; i++)
#pragma unroll
            for (int rr = 0; rr < 4; rr++) {
                float p = __shfl_sync(0xffffffffu, s[i], group | rr);
#pragma unroll
                for (int ci = 0; ci < HD / 4; ci++)
                    o[ci] += p * v[rr + 4 * i][r + 4 * ci];
            }
    }
    if (qi < rows)
#pragma unroll
        for (int ci = 0; ci < HD / 4; ci++)
            cu_put(y, y16, (size_t)(t0 + qi) * C + (size_t)h * HD + r + 4 * ci, o[ci] / l);
}

/* the tiled kernel for this head dim, or NULL */
static void (*tiled_for(int hd))(float *, cu_rounded, const float *, kb_kv, int, const cu_step *,
                                 int, int, float)
{
    switch (hd) {
        case 16: return attend_tiled_k<16>;
        case 32: return attend_tiled_k<32>;
        case 64: return attend_tiled_k<64>;
        default: return NULL;
    }
}

enum { CHUNK = 128 };

/* Leaves a chunk's max and sum of exponentials beside its weighted values: the head's partials, in
 * the block that arrives last (which reduces them), else NULL. */
__device__ static const float *chunk_done(float *out, float mx, float sum, unsigned *done,
                                          int chunks, int *flag, const float *head_parts)
{
    if (threadIdx.x == 0) {
        out[0] = mx;
        out[1] = sum;
    }
    return cu_last_block(done, (unsigned)chunks, flag) ? head_parts : NULL;
}

/* The probe of a decode step (kernels/backend.h's kb_probe) in device memory: each chunk's block
 * leaves its exponentials (against its own max) in e, and the head's last block weighs each by its
 * chunk's factor against the head's max and total, as the output's reduction does, and sums them
 * span by span into this layer's rows of mass. mass NULL: no probe. */
typedef struct {
    const int *start;    /* the spans' n_spans + 1 boundaries */
    int n_spans, stride; /* stride: positions per head in e */
    float *mass;         /* this layer's [heads][n_spans] */
    float *e;            /* [heads][stride] */
} cu_probe;

__device__ static void probe_leave(const cu_probe &pr, int h, int from, int rows, const float *s)
{
    if (pr.mass)
        for (int r = threadIdx.x; r < rows; r += blockDim.x)
            pr.e[(size_t)h * pr.stride + from + r] = s[r];
}

/* p: the head's partials (hd + 2 floats a chunk of `chunk` positions), m their max */
__device__ static void probe_sum(const cu_probe &pr, const float *p, int hd, int chunks, int chunk,
                                 float m, int h, int len, float *red)
{
    if (!pr.mass)
        return;
    float total = 0;
    for (int k = 0; k < chunks; k++) {
        float ks = __ldcg(p + (size_t)k * (hd + 2) + 1);
        if (ks != 0)
            total += ks * __expf(__ldcg(p + (size_t)k * (hd + 2)) - m);
    }
    const float *e = pr.e + (size_t)h * pr.stride;
    for (int sp = 0; sp < pr.n_spans; sp++) { /* uniform: every thread reaches each reduction */
        int j1 = min(pr.start[sp + 1], len);
        float part = 0;
        for (int j = pr.start[sp] + (int)threadIdx.x; j < j1; j += blockDim.x)
            part += __ldcg(e + j) * __expf(__ldcg(p + (size_t)(j / chunk) * (hd + 2)) - m);
        part = block_reduce(part, red, 0);
        if (threadIdx.x == 0)
            pr.mass[(size_t)h * pr.n_spans + sp] = part / total;
    }
}

/* Decode: grid (heads, chunks). Each block leaves its chunk's max, sum of exponentials and weighted
 * values as a partial; the last block of a head to finish (a counter per head, reset by that block
 * for the next step) rescales the partials to one max and writes the head's output. The block whose
 * chunk holds the new position stores its head's key and value first: no other block reads them. */
__global__ static void attend_decode_k(float *y, cu_rounded y16, float *part, unsigned *done,
                                       const float *qkv, kb_kv kv, int layer, const cu_step *st,
                                       int C, float scale, cu_probe pr)
{
    __shared__ float s[CHUNK];
    __shared__ float red[32];
    __shared__ int last;
    int t = blockIdx.z, head = t * gridDim.x + blockIdx.x;
    int h = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y, hd = kv.head_dim,
        len = st->past + t + 1;
    int from = chunk * CHUNK, to = min(len, from + CHUNK);
    float *out = part + ((size_t)head * chunks + chunk) * (hd + 2), mx = -INFINITY, sum = 0;
    qkv += (size_t)t * 3 * C;
    if (from < len) {
        if (to == len && gridDim.z == 1) {
            const float *src = qkv + (size_t)h * hd;
            store(kv, layer, 0, h, st->past, src + C, &red[0]);
            store(kv, layer, 1, h, st->past, src + 2 * C, &red[0]);
            __syncthreads();
        }
        softmax_part(s, red, kv, qkv + (size_t)h * hd, layer, h, from, to, scale, &mx, &sum);
        probe_leave(pr, h, from, to - from, s);
        for (int c = threadIdx.x; c < hd; c += blockDim.x) {
            float o = 0;
            for (int j = from; j < to; j++)
                o += s[j - from] * value_of(kv, layer, 1, h, j, c);
            out[2 + c] = o;
        }
    }
    const float *p = chunk_done(out, mx, sum, &done[head], chunks, &last,
                                part + (size_t)head * chunks * (hd + 2));
    if (!p)
        return;
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
        cu_put(y, y16, (size_t)t * C + (size_t)h * hd + c, o / total);
    }
    probe_sum(pr, p, hd, chunks, CHUNK, m, h, len, red);
}

/* Decode, flash-decoding layout (the fast kernels): grid (heads, chunks of FD_CHUNK positions), as
 * above, but each block first resolves its rows' addresses (and int8 scales) into shared memory, in
 * parallel, so no inner loop waits on the block table; L lanes read one key or value row with
 * 16-byte loads (L = the row's bytes / 16, a power of two up to 32), a warp taking 32 / L rows at a
 * time; the value rows are split across the warps; the last block of a head reduces the chunks'
 * partials with all its threads. The new position's key and value are stored first, as above. */
enum {
    FD_CHUNK = 64,
    FD_THREADS = 128,
    FD_WARPS = FD_THREADS / 32,
    FD_MAX_HD = 256,
    FD_MAX_CHUNKS = 1024
};

template <dtype T>
__global__ static void __launch_bounds__(FD_THREADS)
    attend_flash_k(float *y, cu_rounded y16, float *part, unsigned *done, const float *qkv,
                   kb_kv kv, int layer, const cu_step *st, int C, float scale, cu_probe pr)
{
    enum { E = cu_vec<T>::E };
    __shared__ const char *krow[FD_CHUNK], *vrow[FD_CHUNK];
    __shared__ float kscale[FD_CHUNK], vscale[FD_CHUNK], s[FD_CHUNK], red[32],
        opart[FD_WARPS][FD_MAX_HD];
    __shared__ float wts[FD_MAX_CHUNKS];
    __shared__ int last;
    int t = blockIdx.z, head = t * gridDim.x + blockIdx.x;
    int h = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y, hd = kv.head_dim,
        len = st->past + t + 1;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int L = hd / E, G = 32 / L, piece = lane % L, group = lane / L;
    int from = chunk * FD_CHUNK, rows = max(0, min(len, from + FD_CHUNK) - from);
    float *out = part + ((size_t)head * chunks + chunk) * (hd + 2), mx = -INFINITY, sum = 0;
    qkv += (size_t)t * 3 * C;
    if (rows > 0) {
        if (from + rows == len && gridDim.z == 1) {
            const float *src = qkv + (size_t)h * hd;
            store(kv, layer, 0, h, st->past, src + C, &red[0]);
            store(kv, layer, 1, h, st->past, src + 2 * C, &red[0]);
        }
        for (int r = tid; r < rows; r += FD_THREADS) {
            krow[r] = (const char *)kvl_row(&kv, layer, 0, h, from + r);
            vrow[r] = (const char *)kvl_row(&kv, layer, 1, h, from + r);
            kscale[r] = T == DT_I8 ? *kvl_scale(&kv, layer, 0, h, from + r) : 1.0f;
            vscale[r] = T == DT_I8 ? *kvl_scale(&kv, layer, 1, h, from + r) : 1.0f;
        }
        __syncthreads(); /* also orders the new row's store before its reads (plain loads: it was
                            written here) */
        float q[E], o[E];
        const float *qh = qkv + (size_t)h * hd + piece * E;
#pragma unroll
        for (int e = 0; e < E; e++)
            q[e] = qh[e] * scale, o[e] = 0;
        /* the warp-uniform loop bound keeps every lane in the shuffles */
        for (int base = warp * G; base < rows; base += FD_WARPS * G) {
            int r = base + group;
            float d = 0, k[E];
            if (r < rows) {
                cu_widen<T>(*(const uint4 *)(krow[r] + piece * 16), k);
#pragma unroll
                for (int e = 0; e < E; e++)
                    d += q[e] * k[e];
            }
            for (int off = L / 2; off > 0; off >>= 1)
                d += __shfl_xor_sync(0xffffffffu, d, off);
            if (r < rows && piece == 0)
                s[r] = d * kscale[r];
        }
        __syncthreads();
        mx = block_reduce(tid < rows ? s[tid] : -INFINITY, red, 1);
        float ex = 0;
        if (tid < rows)
            s[tid] = ex = __expf(s[tid] - mx);
        sum = block_reduce(ex, red, 0); /* its barriers publish s */
        probe_leave(pr, h, from, rows, s);
        for (int base = warp * G; base < rows; base += FD_WARPS * G) {
            int r = base + group;
            if (r < rows) {
                float v[E], p = s[r] * vscale[r];
                cu_widen<T>(*(const uint4 *)(vrow[r] + piece * 16), v);
#pragma unroll
                for (int e = 0; e < E; e++)
                    o[e] += p * v[e];
            }
        }
#pragma unroll
        for (int e = 0; e < E; e++) {
            for (int off = L; off < 32; off <<= 1) /* the groups holding the same piece */
                o[e] += __shfl_xor_sync(0xffffffffu, o[e], off);
            if (group == 0)
                opart[warp][piece * E + e] = o[e];
        }
        __syncthreads();
        for (int c = tid; c < hd; c += FD_THREADS) {
            float t = 0;
            for (int w = 0; w < FD_WARPS; w++)
                t += opart[w][c];
            out[2 + c] = t;
        }
    }
    const float *p = chunk_done(out, mx, sum, &done[head], chunks, &last,
                                part + (size_t)head * chunks * (hd + 2));
    if (!p)
        return;
    float m = -INFINITY;
    for (int k = tid; k < chunks; k += FD_THREADS)
        m = fmaxf(m, __ldcg(p + (size_t)k * (hd + 2)));
    m = block_reduce(m, red, 1);
    float mass = 0;
    for (int k = tid; k < chunks; k += FD_THREADS) {
        float ks = __ldcg(p + (size_t)k * (hd + 2) + 1);
        wts[k] = ks == 0 ? 0.0f : __expf(__ldcg(p + (size_t)k * (hd + 2)) - m);
        mass += ks * wts[k];
    }
    float total = block_reduce(mass, red, 0); /* its barriers publish wts */
    for (int c = tid; c < hd; c += FD_THREADS) {
        float acc = 0;
        for (int k = 0; k < chunks; k++)
            if (wts[k] != 0)
                acc += __ldcg(p + (size_t)k * (hd + 2) + 2 + c) * wts[k];
        cu_put(y, y16, (size_t)t * C + (size_t)h * hd + c, acc / total);
    }
    probe_sum(pr, p, hd, chunks, FD_CHUNK, m, h, len, red);
}

/* the flash-decoding kernel for this cache, or NULL where its rows do not fit its lanes (the basic
 * kernel serves those) */
static void (*flash_for(const kb_kv *kv, int chunks))(float *, cu_rounded, float *, unsigned *,
                                                      const float *, kb_kv, int, const cu_step *,
                                                      int, float, cu_probe)
{
    size_t bytes = dt_bytes(kv->type, (size_t)kv->head_dim);
    int lanes = (int)(bytes / 16);
    if (kv->type == DT_Q4 || bytes % 16 || lanes < 1 || lanes > 32 || (lanes & (lanes - 1)) ||
        kv->head_dim > FD_MAX_HD || chunks > FD_MAX_CHUNKS)
        return NULL;
    switch (kv->type) {
        case DT_F32: return attend_flash_k<DT_F32>;
        case DT_F16: return attend_flash_k<DT_F16>;
        case DT_BF16: return attend_flash_k<DT_BF16>;
        default: return attend_flash_k<DT_I8>;
    }
}

enum { MAX_HEADS = 1024 };

/* A counter per head (zero between steps: each step's last block resets its head's), then the
 * decode partials. */
static int decode_buffers(kb_backend *b, int heads, size_t part_bytes, unsigned **done,
                          float **part)
{
    cuda_state *st = cuda_of(b);
    if (heads > MAX_HEADS)
        return err_set("%d attention heads (times queries); the decode kernel counts at most %d",
                       heads, MAX_HEADS);
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

/* The probe's device side for this layer: the buffers grown, the spans sent (a pageable copy,
 * taken at the call; each layer's, for a caller that runs one); after the last layer, the mass
 * copied back (into pageable memory: it waits for the step's work so far). */
static int probe_args(kb_backend *b, const kb_probe *probe, const kb_kv *kv, int layer, int most,
                      cu_probe *pr)
{
    cuda_state *st = cuda_of(b);
    memset(pr, 0, sizeof *pr);
    if (!probe)
        return 0;
    int H = kv->n_head, S = probe->n_spans;
    size_t starts = ((size_t)S + 1 + 63) & ~(size_t)63, mass = (size_t)kv->n_layer * H * S;
    size_t bytes = sizeof(int) * starts + sizeof(float) * (mass + (size_t)H * most);
    if (bytes > st->probe_bytes && cuda_grow(b, &st->probe, &st->probe_bytes, bytes))
        return -1;
    int *start = (int *)st->probe;
    float *all = (float *)(start + starts);
    *pr = (cu_probe){start, S, most, all + (size_t)layer * H * S, all + mass};
    CK(cudaMemcpyAsync(start, probe->start, sizeof(int) * ((size_t)S + 1), cudaMemcpyHostToDevice,
                       st->stream));
    return 0;
}

static int probe_done(kb_backend *b, const kb_probe *probe, const kb_kv *kv, int layer)
{
    cuda_state *st = cuda_of(b);
    if (!probe || layer != kv->n_layer - 1)
        return 0;
    size_t starts = ((size_t)probe->n_spans + 1 + 63) & ~(size_t)63;
    CK(cudaMemcpyAsync(probe->mass, (int *)st->probe + starts,
                       sizeof(float) * (size_t)kv->n_layer * kv->n_head * probe->n_spans,
                       cudaMemcpyDeviceToHost, st->stream));
    return 0;
}

int cuda_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past,
                   int n, const kb_probe *probe)
{
    if (probe && n != 1)
        return err_set("an attention probe is for one-token steps, not %d tokens", n);
    cuda_state *st = cuda_of(b);
    cudaStream_t stream = st->stream;
    int T = past + n, C = kv->n_head * kv->head_dim, hd = kv->head_dim;
    float scale = 1.0f / sqrtf((float)hd);
    const cu_step *step;
    cu_rounded y16;
    if (cuda_step_args(b, NULL, 0, past, NULL, &step) ||
        cuda_rounded_out(b, y, (size_t)n * C, &y16))
        return -1;
    if (!kv->dev_table)
        return err_set("the cache's block table is not in GPU memory (sending it failed)");
    kb_kv dkv = *kv; /* the kernels read the device copy the cache manager keeps current */
    dkv.table = kv->dev_table;
    if (n == 1 || (n <= CU_TOKENS && st->kernels == KB_KERNELS_FAST)) {
        int most = kv->max_tokens > T ? kv->max_tokens : T,
            fast_chunks = (most + FD_CHUNK - 1) / FD_CHUNK;
        auto flash = st->kernels == KB_KERNELS_FAST ? flash_for(kv, fast_chunks) : NULL;
        int chunk = flash ? (int)FD_CHUNK : (int)CHUNK, chunks = (most + chunk - 1) / chunk;
        unsigned *done = NULL;
        float *part = NULL;
        cu_probe pr;
        if (decode_buffers(b, kv->n_head * n,
                           sizeof(float) * (size_t)n * kv->n_head * chunks * (hd + 2), &done,
                           &part) ||
            probe_args(b, probe, kv, layer, chunks * chunk, &pr))
            return -1;
        if (n > 1) { /* the decode kernel stores its one new row itself */
            store_k<<<dim3(n, kv->n_head), 64, 0, stream>>>(dkv, qkv, layer, step, C);
            CK_LAUNCH();
        }
        dim3 grid(kv->n_head, chunks, n);
        if (flash)
            flash<<<grid, FD_THREADS, 0, stream>>>(y, y16, part, done, qkv, dkv, layer, step, C,
                                                   scale, pr);
        else
            attend_decode_k<<<grid, CHUNK, 0, stream>>>(y, y16, part, done, qkv, dkv, layer, step,
                                                        C, scale, pr);
        CK_LAUNCH();
        return probe_done(b, probe, kv, layer);
    }
    size_t shared = sizeof(float) * (size_t)T;
    if (shared > (size_t)st->prop.sharedMemPerBlockOptin)
        return err_set(
            "attention over %d positions needs %zu bytes of shared memory; this GPU has %zu", T,
            shared, (size_t)st->prop.sharedMemPerBlockOptin);
    store_k<<<dim3(n, kv->n_head), 64, 0, stream>>>(dkv, qkv, layer, step, C);
    CK_LAUNCH();
    if (tiled_for(hd)) {
        tiled_for(hd)<<<dim3((n + QT - 1) / QT, kv->n_head), PREFILL_THREADS, 0, stream>>>(
            y, y16, qkv, dkv, layer, step, n, C, scale);
        CK_LAUNCH();
        return 0;
    }
    if (shared > 48 * 1024)
        CK(cudaFuncSetAttribute(attend_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)shared));
    attend_k<<<dim3(n, kv->n_head), 128, shared, stream>>>(y, y16, qkv, dkv, layer, step, C, scale);
    CK_LAUNCH();
    return 0;
}
