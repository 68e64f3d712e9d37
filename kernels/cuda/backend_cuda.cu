/* The CUDA backend object: device memory, one stream, cuBLAS and cuBLASLt handles, growing buffers
 * and the step's scalars (the recorded decode step is graph.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

int cuda_grow(kb_backend *b, void **buf, size_t *have, size_t bytes)
{
    cuda_state *s = cuda_of(b);
    if (bytes <= *have)
        return 0;
    CK(cudaStreamSynchronize(s->stream)); /* work in flight may still read the old buffer */
    if (*buf)
        CK(cudaFree(*buf));
    *buf = NULL;
    *have = 0;
    CK(cudaMalloc(buf, bytes));
    *have = bytes;
    s->generation++;
    return 0;
}

int cuda_scratch(kb_backend *b, size_t bytes, void **out)
{
    cuda_state *s = cuda_of(b);
    if (cuda_grow(b, &s->scratch, &s->scratch_bytes, bytes))
        return -1;
    *out = s->scratch;
    return 0;
}

static int grow_step(cuda_state *s, int cap)
{
    if (cap <= s->step_cap)
        return 0;
    cap = cap < 1024 ? 1024 : cap * 2;
    CK(cudaStreamSynchronize(s->stream));
    if (s->hstep)
        CK(cudaFreeHost(s->hstep));
    if (s->dstep)
        CK(cudaFree(s->dstep));
    free(s->hist_sent);
    s->hstep = NULL;
    s->dstep = NULL;
    s->hist_sent = NULL;
    s->step_cap = s->n_hist_sent = 0;
    CK(cudaHostAlloc((void **)&s->hstep, cu_step_bytes(cap), cudaHostAllocDefault));
    CK(cudaMalloc((void **)&s->dstep, cu_step_bytes(cap)));
    if (!(s->hist_sent = (int *)malloc(sizeof(int) * (size_t)cap)))
        return err_set("out of memory");
    s->step_cap = cap;
    s->generation++;
    return 0;
}

int cuda_stage(cuda_state *s, const int *ids, int n, int past, int pos, const kb_sample *pick)
{
    int hist = pick ? pick->n_history : 0;
    if (grow_step(s, n > hist ? n : hist))
        return -1;
    CK(cudaStreamSynchronize(s->stream)); /* the last copy out of the pinned twin has been made */
    cu_step *h = s->hstep;
    h->past = past;
    h->pos = pos;
    h->n = n;
    h->cap = s->step_cap;
    h->n_hist = hist;
    if (n)
        memcpy(h->data, ids, sizeof(int) * (size_t)n);
    if (pick) {
        h->top_k = pick->top_k;
        h->temp = pick->temp;
        h->top_p = pick->top_p;
        h->penalty = pick->repeat_penalty;
        h->u = pick->u;
        if (hist)
            memcpy(h->data + h->cap, pick->history, sizeof(int) * (size_t)hist);
    }
    return 0;
}

int cuda_upload(cuda_state *s, int with_header)
{
    const cu_step *h = s->hstep;
    const int *hist = h->data + h->cap;
    int from = 0, n = h->n_hist;
    while (from < n && from < s->n_hist_sent && s->hist_sent[from] == hist[from])
        from++;
    if (from <
        n) { /* the pinned source stays put until the next stage, which waits for the stream */
        CK(cudaMemcpyAsync(s->dstep->data + h->cap + from, hist + from,
                           sizeof(int) * (size_t)(n - from), cudaMemcpyHostToDevice, s->stream));
        memcpy(s->hist_sent + from, hist + from, sizeof(int) * (size_t)(n - from));
        s->n_hist_sent = n;
    }
    if (with_header)
        CK(cudaMemcpyAsync(s->dstep, h, cu_header_bytes(h->n), cudaMemcpyHostToDevice, s->stream));
    return 0;
}

int cuda_step_args(kb_backend *b, const int *ids, int n, int past, const kb_sample *pick,
                   const cu_step **dev)
{
    cuda_state *s = cuda_of(b);
    if (!s->in_step && (cuda_stage(s, ids, n, past, past, pick) || cuda_upload(s, 1)))
        return -1;
    *dev = s->dstep;
    return 0;
}

static void *cu_alloc(kb_backend *b, size_t bytes, const char *what)
{
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        err_set("out of GPU memory allocating %zu bytes for %s (%zu of %zu bytes free): %s", bytes,
                what, free_b, total, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cu_release(kb_backend *b, void *p)
{
    if (p) {
        cuda_rounded_forget(b, p);
        cudaStreamSynchronize(cuda_stream(b));
        cudaFree(p);
    }
}

static void *cu_host_alloc(kb_backend *b, size_t bytes, const char *what)
{
    (void)b;
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        err_set("cannot pin %zu bytes of host memory for %s: %s", bytes, what,
                cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cu_host_release(kb_backend *b, void *p)
{
    if (p) {
        cudaStreamSynchronize(cuda_stream(b));
        cudaFreeHost(p);
    }
}

/* Unified addressing tells host from device. cudaMemcpy2D does not allow overlap: overlapping
 * regions (the cache sliding within one block) go through scratch. */
static int cu_copy2d(kb_backend *b, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                     size_t width, size_t height)
{
    cudaStream_t st = cuda_stream(b);
    if (!height || !width)
        return 0;
    cuda_rounded_forget(b, dst);
    const char *d = (const char *)dst, *s = (const char *)src;
    size_t dspan = dst_pitch * (height - 1) + width, sspan = src_pitch * (height - 1) + width;
    if (d < s + sspan && s < d + dspan) {
        void *tmp;
        if (cuda_scratch(b, width * height, &tmp))
            return -1;
        CK(cudaMemcpy2DAsync(tmp, width, src, src_pitch, width, height, cudaMemcpyDefault, st));
        src = tmp;
        src_pitch = width;
    }
    if (height == 1) /* one row may be larger than the most a 2D copy's pitch allows */
        CK(cudaMemcpyAsync(dst, src, width, cudaMemcpyDefault, st));
    else
        CK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDefault, st));
    CK(cudaStreamSynchronize(st)); /* the caller may reuse or read host memory at once */
    return 0;
}

static int cu_copy(kb_backend *b, void *dst, const void *src, size_t bytes)
{
    return cu_copy2d(b, dst, bytes, src, bytes, bytes, 1);
}

static int cu_describe(kb_backend *b, char *buf, size_t n)
{
    cuda_state *s = cuda_of(b);
    int driver = 0;
    CK(cudaDriverGetVersion(&driver));
    snprintf(buf, n, "%s, driver %d.%d, compute %d.%d", s->prop.name, driver / 1000,
             driver % 1000 / 10, s->prop.major, s->prop.minor);
    return 0;
}

/* Recorded steps hold the kernels of the set they were recorded with: a switch records anew. The
 * fused products exist in the fast set only; without them the forward pass calls the basic kernels,
 * whose passes of several tokens go through cuBLAS (not a decode step's sums: no step_rows). */
static int cu_use_kernels(kb_backend *b, kb_kernels k)
{
    cuda_state *s = cuda_of(b);
    s->kernels = k;
    s->generation++;
    b->linear = k == KB_KERNELS_FAST ? cuda_linear : NULL;
    b->linear_t = k == KB_KERNELS_FAST ? cuda_linear_t : NULL;
    b->step_rows = k == KB_KERNELS_FAST ? CU_TOKENS : 0;
    return 0;
}

static int cu_step_nodes(kb_backend *b) { return cuda_of(b)->nodes; }

/* double data rate: two transfers a clock over the bus */
static double peak_bandwidth(int device)
{
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 2.0 * khz * 1e3 * bits / 8;
}

static int cu_mem_info(kb_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    (void)b;
    CK(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

static void cu_destroy(kb_backend *b)
{
    if (!b)
        return;
    cuda_state *s = cuda_of(b);
    if (s->stream)
        cudaStreamSynchronize(s->stream);
    cuda_graphs_free(s);
    cuda_plans_free(s);
    cudaFree(s->scratch);
    cudaFree(s->sample_work);
    cudaFree(s->odds_dev);
    if (s->odds_host)
        cudaFreeHost(s->odds_host);
    cudaFree(s->partials);
    cudaFree(s->probe);
    cudaFree(s->mv_work);
    cudaFree(s->rounded);
    cudaFree(s->dstep);
    cudaFree(s->blas_work);
    if (s->hstep)
        cudaFreeHost(s->hstep);
    free(s->hist_sent);
    if (s->blas)
        cublasDestroy(s->blas);
    if (s->lt)
        cublasLtDestroy(s->lt);
    if (s->started)
        cudaEventDestroy(s->started);
    if (s->ended)
        cudaEventDestroy(s->ended);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    free(s);
    free(b);
}

extern "C" int cuda_driver_problem(int driver, int runtime)
{
    if (!driver)
        return err_set("no NVIDIA driver is loaded (no GPU, or its driver is not installed)");
    return err_set(
        "the NVIDIA driver supports CUDA %d.%d but this build needs %d.%d: update the driver",
        driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
}

static int init(cuda_state *s)
{
    int n = 0, runtime = 0, driver = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        cudaRuntimeGetVersion(&runtime);
        cudaDriverGetVersion(&driver);
        return cuda_driver_problem(driver, runtime);
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n < 1))
        return err_set("no CUDA device found");
    CK(e);
    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&s->prop, 0));
    /* the oldest code built is sm_80: an older card would fail every launch ("no kernel image") */
    if (s->prop.major < 8)
        return err_set("%s has compute capability %d.%d; kvchat's CUDA kernels need 8.0 or newer "
                       "(RTX 30-series, A100, "
                       "L4 or later)",
                       s->prop.name, s->prop.major, s->prop.minor);
    CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    CB(cublasCreate(&s->blas));
    CB(cublasSetStream(s->blas, s->stream));
    CK(cudaMalloc(&s->blas_work, CUDA_BLAS_WORKSPACE));
    CB(cublasSetWorkspace(s->blas, s->blas_work, CUDA_BLAS_WORKSPACE));
    CB(cublasLtCreate(&s->lt));
    CK(cudaEventCreate(&s->started));
    CK(cudaEventCreate(&s->ended));
    if (cuda_plans_init(s))
        return -1;
    /* the default math keeps FP32 GEMMs in FP32 (TF32 only when asked for), so f32 weights match
     * the CPU reference, and lets 16-bit GEMMs use the tensor cores */
    CB(cublasSetMathMode(s->blas, CUBLAS_DEFAULT_MATH));
    return grow_step(s, 1024);
}

extern "C" kb_backend *cuda_backend_create(void)
{
    kb_backend *b = (kb_backend *)calloc(1, sizeof *b);
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!b || !s) {
        free(b);
        free(s);
        err_set("out of memory");
        return NULL;
    }
    b->ctx = s;
    s->round_made = s->round_wanted = DT_F32;
    if (init(s)) {
        cu_destroy(b);
        return NULL;
    }
    b->name = "cuda";
    b->threads = 1;
    b->device_memory = 1;
    b->alloc = cu_alloc;
    b->release = cu_release;
    b->host_alloc = cu_host_alloc;
    b->host_release = cu_host_release;
    b->copy = cu_copy;
    b->copy2d = cu_copy2d;
    b->mem_info = cu_mem_info;
    b->describe = cu_describe;
    b->matmul = cuda_matmul;
    b->matmul_t = cuda_matmul_t;
    b->embed = cuda_embed;
    b->layernorm = cuda_layernorm;
    b->add_layernorm = cuda_add_layernorm;
    b->attention = cuda_attention;
    b->sample = cuda_sample;
    b->odds = cuda_odds;
    b->step_begin = cuda_step_begin;
    b->step_end = cuda_step_end;
    b->step_seconds = cuda_step_seconds;
    b->step_nodes = cu_step_nodes;
    b->use_kernels = cu_use_kernels;
    b->peak_bandwidth = peak_bandwidth(0);
    b->destroy = cu_destroy;
    cu_use_kernels(b, KB_KERNELS_FAST);
    return b;
}
