/* The CPU backend object: thread count and one growing scratch buffer shared by its kernels
 * (a backend serves one forward pass at a time). */
#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../err.h"
#include "cpu.h"

typedef struct {
    float *p;
    size_t cap;
} cpu_buf;

typedef struct {
    cpu_buf scratch, staging;
    cpu_threads threads;
} cpu_state;

static float *grow(cpu_buf *buf, size_t floats)
{
    if (floats <= buf->cap)
        return buf->p;
    float *p = NULL;
    size_t bytes = (floats * sizeof(float) + 127) & ~(size_t)127;
    if (posix_memalign((void **)&p, 128, bytes)) {
        err_set("out of memory allocating %zu bytes of CPU scratch", bytes);
        return NULL;
    }
    free(buf->p);
    buf->p = p;
    buf->cap = floats;
    return p;
}

float *cpu_scratch(kb_backend *b, size_t floats)
{
    return grow(&((cpu_state *)b->ctx)->scratch, floats);
}

float *cpu_staging(kb_backend *b, size_t floats)
{
    return grow(&((cpu_state *)b->ctx)->staging, floats);
}

static void *cpu_alloc(kb_backend *b, size_t bytes, const char *what)
{
    (void)b;
    return err_alloc_big((bytes + 127) & ~(size_t)127, what);
}

static void cpu_release(kb_backend *b, void *p)
{
    (void)b;
    free(p);
}

static int cpu_copy(kb_backend *b, void *dst, const void *src, size_t bytes)
{
    (void)b;
    memmove(dst, src, bytes);
    return 0;
}

static int cpu_copy2d(kb_backend *b, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                      size_t width, size_t height)
{
    (void)b;
    for (size_t r = 0; r < height;
         r++) /* in ascending order: a lower dst never overwrites unread src */
        memmove((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, width);
    return 0;
}

static int cpu_mem_info(kb_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    (void)b;
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES),
         total = sysconf(_SC_PHYS_PAGES);
    *free_bytes = avail > 0 && page > 0 ? (size_t)avail * (size_t)page : 0;
    *total_bytes = total > 0 && page > 0 ? (size_t)total * (size_t)page : 0;
    return 0;
}

int cpu_max_threads(kb_backend *b) { return ((cpu_state *)b->ctx)->threads.count[0]; }

static int cpu_step_begin(kb_backend *b, const kb_step *st, int *replayed)
{
    *replayed = 0;
    b->threads = cpu_threads_begin(&((cpu_state *)b->ctx)->threads, st->n == 1);
    return 0;
}

static int cpu_step_end(kb_backend *b, int ok)
{
    (void)ok;
    cpu_threads_end(&((cpu_state *)b->ctx)->threads);
    return 0;
}

static void cpu_destroy(kb_backend *b)
{
    if (!b)
        return;
    cpu_state *s = b->ctx;
    free(s->scratch.p);
    free(s->staging.p);
    free(s);
    free(b);
}

kb_backend *cpu_backend_create(int threads)
{
    int adaptive = threads <= 0;
    if (threads <=
        0) { /* the cores this process may run on (taskset, cgroups' cpusets), not the machine's */
        cpu_set_t set;
        long n = sched_getaffinity(0, sizeof set, &set) ? sysconf(_SC_NPROCESSORS_ONLN)
                                                        : CPU_COUNT(&set);
        threads = n > 0 ? (int)n : 1;
    }
    kb_backend *b = err_calloc(1, sizeof *b, "the CPU backend");
    cpu_state *s = err_calloc(1, sizeof *s, "the CPU backend");
    if (!b || !s) {
        free(b);
        free(s);
        return NULL;
    }
    /* kernels call OpenBLAS from inside their own OpenMP threads, one GEMM per thread */
    openblas_set_num_threads(1);
    if (cpu_blas_reserve(threads)) {
        free(b);
        free(s);
        return NULL;
    }
    cpu_threads_init(&s->threads, threads, adaptive);
    *b = (kb_backend){
        .name = "cpu",
        .ctx = s,
        .threads = threads,
        .step_rows = CPU_STREAM_MAX_TOKENS,
        .alloc = cpu_alloc,
        .release = cpu_release,
        .copy = cpu_copy,
        .copy2d = cpu_copy2d,
        .mem_info = cpu_mem_info,
        .pack = cpu_pack,
        .matmul = cpu_matmul,
        .matmul_t = cpu_matmul_t,
        .embed = cpu_embed,
        .layernorm = cpu_layernorm,
        .attention = cpu_attention,
        .add_layernorm = cpu_add_layernorm,
        .sample = cpu_sample,
        .odds = cpu_odds,
        .host_alloc = cpu_alloc,
        .host_release = cpu_release,
        .destroy = cpu_destroy,
        .step_begin = cpu_step_begin,
        .step_end = cpu_step_end,
    };
    return b;
}
