/* Choosing the next token on the device, by the rule of kernels/cpu/sample.c (its twin): one block
 * of 1024 threads over the vocabulary. Where the CPU sorts, this finds the same thresholds by radix
 * selection on the integer probabilities, four passes of eight bits; sums are integers, so the
 * answer does not depend on the order threads add in. Only the id leaves the device. The basic
 * kernel (the previous release's) and the fast one differ in how, not in what they choose. */
#include <math.h>
#include <stdint.h>

#include "common.cuh"

#define Q_SCALE 4294967040.0f /* the largest float below 2^32, as on the CPU */

enum { THREADS = 1024, WARPS = THREADS / 32 };

typedef unsigned long long u64;

__device__ static u64 block_sum(u64 v, u64 *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (threadIdx.x % 32 == 0)
        sh[threadIdx.x / 32] = v;
    __syncthreads();
    u64 t = 0;
    for (int w = 0; w < WARPS; w++)
        t += sh[w];
    return t;
}

/* the sum of v over the threads before this one */
__device__ static u64 exclusive_scan(u64 v, u64 *sh)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    u64 inc = v;
    for (int o = 1; o < 32; o <<= 1) {
        u64 up = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += up;
    }
    __syncthreads();
    if (lane == 31)
        sh[warp] = inc;
    __syncthreads();
    u64 before = 0;
    for (int w = 0; w < warp; w++)
        before += sh[w];
    return before + inc - v;
}

/* The largest t such that the weight of values q >= t (among q >= floor_q) reaches need, where the
 * weight is 1 per value or the value itself: the k-th largest value, or the top-p cut. WARP_SCAN: a
 * warp finds each pass's digit from the 256 bins (the fast kernels), else one thread walks them. */
template <bool WARP_SCAN>
__device__ static unsigned radix_select(const unsigned *q, int V, unsigned floor_q, int by_mass,
                                        u64 need, u64 *hist)
{
    __shared__ unsigned sh_prefix;
    __shared__ u64 sh_above;
    unsigned prefix = 0, mask = 0;
    u64 above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x)
            hist[i] = 0;
        __syncthreads();
        /* most values share a digit (the small probabilities), so lanes with equal digits add
         * theirs up first and one of them updates the bin: a warp makes one atomic per distinct
         * digit */
        for (int base = 0; base < V; base += blockDim.x) {
            int i = base + threadIdx.x;
            unsigned v = i < V ? q[i] : 0u;
            int in = i < V && v >= floor_q && (v & mask) == prefix;
            unsigned d = in ? (v >> shift) & 255u : 256u;
            unsigned peers = __match_any_sync(0xffffffffu, d);
            if (in) {
                unsigned w =
                    by_mass ? v : 1u; /* summed in two 16-bit halves: 32 of them cannot overflow */
                unsigned lo = __reduce_add_sync(peers, w & 0xffffu),
                         hi = __reduce_add_sync(peers, w >> 16);
                if (threadIdx.x % 32 == (unsigned)(__ffs(peers) - 1))
                    atomicAdd(&hist[d], (u64)lo + ((u64)hi << 16));
            }
        }
        __syncthreads();
        if constexpr (WARP_SCAN) {
            if (threadIdx.x < 32) {
                /* lane l holds bins 255 - 8l down to 248 - 8l: the lanes' sums in that order,
                 * scanned */
                int lane = threadIdx.x;
                u64 mine = 0;
                for (int j = 0; j < 8; j++)
                    mine += hist[255 - 8 * lane - j];
                u64 inc = mine;
                for (int o = 1; o < 32; o <<= 1) {
                    u64 up = __shfl_up_sync(0xffffffffu, inc, o);
                    if (lane >= o)
                        inc += up;
                }
                unsigned reach = __ballot_sync(0xffffffffu, above + inc >= need);
                if (!reach &&
                    lane == 0) { /* no digit reaches it: as the walk over every bin leaves it */
                    sh_prefix = prefix;
                    sh_above = above;
                } else if (reach && lane == __ffs(reach) - 1) {
                    u64 acc = above + inc - mine;
                    for (int j = 0; j < 8; j++) {
                        int d = 255 - 8 * lane - j;
                        if (acc + hist[d] >= need) {
                            sh_prefix = prefix | ((unsigned)d << shift);
                            sh_above = acc;
                            break;
                        }
                        acc += hist[d];
                    }
                }
            }
        } else if (threadIdx.x == 0) {
            sh_prefix = prefix;
            sh_above = above;
            for (int d = 255; d >= 0; d--) {
                if (above + hist[d] >= need) {
                    sh_prefix = prefix | ((unsigned)d << shift);
                    sh_above = above;
                    break;
                }
                above += hist[d];
            }
        }
        __syncthreads();
        prefix = sh_prefix;
        above = sh_above;
        mask |= 255u << shift;
        __syncthreads();
    }
    return prefix;
}

/* the largest logit(i) and its id (the lowest among equals), for every thread; 0x7fffffff when none
 * compares (all NaN) */
template <typename F>
__device__ static void argmax(F logit, int V, float *bv_out, int *bi_out)
{
    __shared__ float best_v[WARPS];
    __shared__ int best_i[WARPS];
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = logit(i);
        if (v > bv)
            bv = v, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi))
            bv = ov, bi = oi;
    }
    if (threadIdx.x % 32 == 0)
        best_v[threadIdx.x / 32] = bv, best_i[threadIdx.x / 32] = bi;
    __syncthreads();
    bv = best_v[0];
    bi = best_i[0];
    for (int w = 1; w < WARPS; w++)
        if (best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi))
            bv = best_v[w], bi = best_i[w];
    *bv_out = bv;
    *bi_out = bi;
}

/* The kept set's threshold over vals[0..n) (every q, or only the nonzero ones: an id whose q is 0
 * moves neither threshold), by the rule of cpu_sample_floor: top-k, then top-p. */
template <bool WARP_SCAN>
__device__ static unsigned kept_floor(const cu_step *st, const unsigned *vals, int n, int V,
                                      u64 *hist, u64 *sh)
{
    unsigned floor_q = 0;
    if (st->top_k > 0 && st->top_k < V && st->top_k <= n) /* more than n: the k-th largest q is 0 */
        floor_q = radix_select<WARP_SCAN>(vals, n, 0, 0, (u64)st->top_k, hist);
    if (st->top_p < 1.0f) {
        u64 local = 0;
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            local += vals[i] >= floor_q ? vals[i] : 0;
        u64 total = block_sum(local, sh);
        u64 need = (u64)((double)st->top_p * (double)total);
        floor_q = radix_select<WARP_SCAN>(vals, n, floor_q, 1, need ? need : 1, hist);
    }
    return floor_q;
}

/* A verify row's odds call: its draws in, kb_odds's figures out (device memory, a pinned twin). */
typedef struct {
    double u, u_rest;
    int id, pick, rest;
    unsigned weight;
    u64 total;
} cu_odds;

/* The draw at u: the walk in id order over the ids kept by floor_q other than except, to the first
 * whose running sum exceeds floor(u * their mass); -1 when they have none. Each thread holds a
 * contiguous range, the scan says where it starts. *mass (when given) gets the mass. */
__device__ static void draw(const unsigned *q, int V, unsigned floor_q, double u, int except,
                            int *out, u64 *mass, u64 *sh)
{
    int tid = threadIdx.x, per = (V + THREADS - 1) / THREADS, lo = tid * per, hi = min(V, lo + per);
    u64 local = 0;
    for (int i = lo; i < hi; i++)
        local += q[i] >= floor_q && i != except ? q[i] : 0;
    u64 total = block_sum(local, sh);
    if (mass && tid == 0)
        *mass = total;
    if (!total) { /* the same in every thread */
        if (tid == 0)
            *out = -1;
        return;
    }
    u64 before = exclusive_scan(local, sh);
    u64 r = (u64)(u * (double)total);
    if (r >= total)
        r = total - 1;
    if (local && before <= r && r < before + local) {
        u64 acc = before;
        for (int i = lo; i < hi; i++)
            if (q[i] >= floor_q && i != except && (acc += q[i]) > r) {
                *out = i;
                break;
            }
    }
}

/* Where block blockIdx.x's row reads and writes: one sample call (odds NULL) is row 0 of one, with
 * the step's draw and output; an odds call's rows share the step's settings, row i's history
 * being the step's less its n - 1 - i last ids. */
typedef struct {
    cu_odds *o;
    int n_hist;
    double u;
    int *out;
} cu_row;

__device__ static cu_row row_of(cu_step *st, cu_odds *odds)
{
    cu_row r;
    r.o = odds ? odds + blockIdx.x : NULL;
    r.n_hist = st->n_hist - (int)(gridDim.x - 1 - blockIdx.x);
    r.u = r.o ? r.o->u : st->u;
    r.out = r.o ? &r.o->pick : &st->out;
    return r;
}

/* the greedy choice (id 0 when no logit compares) */
__device__ static void choose_best(const cu_row &r, int bi)
{
    if (threadIdx.x == 0) {
        *r.out = bi == 0x7fffffff ? 0 : bi;
        if (r.o)
            r.o->total = 0, r.o->weight = 0, r.o->rest = -1;
    }
}

/* the draw from the kept set (its threshold recorded for the tests), and an odds row's other
 * figures */
__device__ static void draw_row(cu_step *st, const cu_row &r, const unsigned *q, int V,
                                unsigned floor_q, u64 *sh)
{
    if (threadIdx.x == 0 && !r.o)
        st->floor_q = floor_q;
    draw(q, V, floor_q, r.u, -1, r.out, r.o ? &r.o->total : NULL, sh);
    if (!r.o)
        return;
    int id = r.o->id;
    if (threadIdx.x == 0)
        r.o->weight = id >= 0 && id < V && q[id] >= floor_q ? q[id] : 0;
    draw(q, V, floor_q, r.o->u_rest, id, &r.o->rest, NULL, sh);
}

/* the basic kernel: the logits copied and penalised in work, which then holds the integer
 * probabilities */
__global__ static void __launch_bounds__(THREADS)
    sample_k(cu_step *st, cu_odds *odds, const float *logits, float *work, int V)
{
    __shared__ u64 hist[256], sh[WARPS];
    int tid = threadIdx.x;
    cu_row r = row_of(st, odds);
    logits += (size_t)V * blockIdx.x;
    work += (size_t)V * blockIdx.x;
    for (int i = tid; i < V; i += blockDim.x)
        work[i] = logits[i];
    __syncthreads();
    /* the penalty, once per distinct id (its first occurrence in the history applies it) */
    const int *h = cu_hist(st);
    float pen = st->penalty;
    if (pen != 1.0f) {
        for (int k = tid; k < r.n_hist; k += blockDim.x) {
            int id = h[k], first = id >= 0 && id < V;
            for (int j = 0; j < k && first; j++)
                first = h[j] != id;
            if (first)
                work[id] = work[id] > 0 ? work[id] / pen : work[id] * pen;
        }
        __syncthreads();
    }
    float bv;
    int bi;
    argmax([&](int i) { return work[i]; }, V, &bv, &bi);
    if (st->temp <= 0 || bi == 0x7fffffff)
        return choose_best(r, bi);
    /* integer probabilities, in place of the logits */
    unsigned *q = (unsigned *)work;
    float temp = st->temp;
    for (int i = tid; i < V; i += blockDim.x)
        q[i] = (unsigned)(expf((work[i] - bv) / temp) * Q_SCALE);
    __syncthreads();
    draw_row(st, r, q, V, kept_floor<false>(st, q, V, V, hist, sh), sh);
}

enum {
    SEEN_WORDS = 2048
}; /* the fast kernel's bitmap of penalised ids: vocabularies up to 65,536 */

/* The fast kernel: the logits read in place, penalised on the fly by a bitmap of the history's ids;
 * the integer probabilities written to q, and the nonzero ones also to cand, where both selections
 * run (an id whose q is 0 can change neither threshold). */
__global__ static void __launch_bounds__(THREADS)
    sample_fast_k(cu_step *st, cu_odds *odds, const float *logits, unsigned *work, int V)
{
    __shared__ u64 hist[256], sh[WARPS];
    __shared__ unsigned seen[SEEN_WORDS];
    __shared__ int n_cand;
    int tid = threadIdx.x, lane = tid % 32;
    cu_row r = row_of(st, odds);
    logits += (size_t)V * blockIdx.x;
    unsigned *q = work + 2 * (size_t)V * blockIdx.x, *cand = q + V;
    float pen = st->penalty;
    if (pen != 1.0f) {
        for (int w = tid; w < (V + 31) / 32; w += blockDim.x)
            seen[w] = 0;
        __syncthreads();
        const int *h = cu_hist(st);
        for (int k = tid; k < r.n_hist; k += blockDim.x)
            if (h[k] >= 0 && h[k] < V)
                atomicOr(&seen[h[k] / 32], 1u << (h[k] % 32));
    }
    if (tid == 0)
        n_cand = 0;
    __syncthreads();
    auto logit = [&](int i) {
        float l = logits[i];
        return pen != 1.0f && (seen[i / 32] >> (i % 32) & 1u) ? (l > 0 ? l / pen : l * pen) : l;
    };
    float bv;
    int bi;
    argmax(logit, V, &bv, &bi);
    if (st->temp <= 0 || bi == 0x7fffffff)
        return choose_best(r, bi);
    float temp = st->temp;
    for (int base = 0; base < V;
         base += blockDim.x) { /* warp-uniform: every lane joins the ballot */
        int i = base + tid;
        unsigned v = i < V ? (unsigned)(expf((logit(i) - bv) / temp) * Q_SCALE) : 0u;
        if (i < V)
            q[i] = v;
        unsigned nz = __ballot_sync(0xffffffffu, v != 0);
        int at = 0;
        if (lane == 0 && nz)
            at = atomicAdd(&n_cand, __popc(nz));
        at = __shfl_sync(0xffffffffu, at, 0);
        if (v)
            cand[at + __popc(nz & ((1u << lane) - 1))] = v;
    }
    __syncthreads();
    unsigned floor_q = kept_floor<true>(st, cand, n_cand, V, hist, sh);
    __syncthreads(); /* q, written above by every thread, is walked in other threads' ranges */
    draw_row(st, r, q, V, floor_q, sh);
}

extern "C" int cuda_sample_kept(kb_backend *b, unsigned *q, int vocab, unsigned *floor_q)
{
    cuda_state *st = cuda_of(b);
    if (!st->sample_work || st->sample_bytes < sizeof(float) * (size_t)vocab)
        return err_set("no sampling to read back");
    CK(cudaStreamSynchronize(st->stream));
    CK(cudaMemcpy(q, st->sample_work, sizeof(unsigned) * (size_t)vocab, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(floor_q, &((cu_step *)st->dstep)->floor_q, sizeof *floor_q,
                  cudaMemcpyDeviceToHost));
    return 0;
}

/* the sampling kernel of the set in use over n rows (odds NULL: one sample call's row) */
static int launch(kb_backend *b, const cu_step *dev, cu_odds *odds, const float *logits, int n,
                  int vocab)
{
    cuda_state *st = cuda_of(b);
    int fast = st->kernels == KB_KERNELS_FAST && vocab <= 32 * SEEN_WORDS;
    if (cuda_grow(b, &st->sample_work, &st->sample_bytes,
                  sizeof(float) * (size_t)vocab * (fast ? 2 : 1) * (size_t)n))
        return -1;
    if (fast)
        sample_fast_k<<<n, THREADS, 0, st->stream>>>((cu_step *)dev, odds, logits,
                                                     (unsigned *)st->sample_work, vocab);
    else
        sample_k<<<n, THREADS, 0, st->stream>>>((cu_step *)dev, odds, logits,
                                                (float *)st->sample_work, vocab);
    CK_LAUNCH();
    return 0;
}

int cuda_sample(kb_backend *b, int *out, const float *logits, int vocab, const kb_sample *s)
{
    cuda_state *st = cuda_of(b);
    const cu_step *dev;
    if (cuda_step_args(b, NULL, 0, 0, s, &dev) || launch(b, dev, NULL, logits, 1, vocab))
        return -1;
    CK(cudaMemcpyAsync(&st->hstep->out, &dev->out, sizeof(int), cudaMemcpyDeviceToHost,
                       st->stream));
    if (st->in_step)
        return 0; /* step_end delivers it */
    CK(cudaStreamSynchronize(st->stream));
    *out = st->hstep->out;
    return 0;
}

int cuda_odds(kb_backend *b, kb_odds *out, const float *logits, int n, int vocab,
              const kb_sample *s, const int *ids, const double *u_rest)
{
    cuda_state *st = cuda_of(b);
    if (n < 1 || n > KB_ODDS_ROWS || st->in_step)
        return err_set("odds of %d rows%s: 1 to %d, outside a step", n,
                       st->in_step ? " inside a step" : "", KB_ODDS_ROWS);
    size_t bytes = sizeof(cu_odds) * KB_ODDS_ROWS;
    if (!st->odds_host) {
        CK(cudaHostAlloc(&st->odds_host, bytes, cudaHostAllocDefault));
        CK(cudaMalloc(&st->odds_dev, bytes));
    }
    kb_sample last = s[0]; /* its history holds every row's */
    last.n_history += n - 1;
    const cu_step *dev;
    if (cuda_step_args(b, NULL, 0, 0, &last, &dev))
        return -1; /* staging waited for the stream: the pinned rows are free to write */
    cu_odds *h = (cu_odds *)st->odds_host, *d = (cu_odds *)st->odds_dev;
    for (int i = 0; i < n; i++)
        h[i] = (cu_odds){.u = s[i].u,
                         .u_rest = u_rest ? u_rest[i] : 0,
                         .id = ids ? ids[i] : -1,
                         .pick = 0,
                         .rest = -1,
                         .weight = 0,
                         .total = 0};
    CK(cudaMemcpyAsync(d, h, sizeof *h * (size_t)n, cudaMemcpyHostToDevice, st->stream));
    if (launch(b, dev, d, logits, n, vocab))
        return -1;
    CK(cudaMemcpyAsync(h, d, sizeof *h * (size_t)n, cudaMemcpyDeviceToHost, st->stream));
    CK(cudaStreamSynchronize(st->stream));
    for (int i = 0; i < n; i++)
        out[i] = (kb_odds){
            .pick = h[i].pick, .rest = h[i].rest, .weight = h[i].weight, .total = h[i].total};
    return 0;
}
