/* OpenBLAS under a memory limit (ulimit -v, ulimit -d). It maps a 128 MiB work buffer for each
 * thread that calls it at once, the first time, and when the mapping fails it retries for ever: a
 * chat that reached its first GEMM with too little address space left hung there. Its own thread
 * pool, started by the library's constructor before main, does the same, so even a command that
 * never multiplies hung at exit, joining a thread that never got its buffer. */
#include <cblas.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../err.h"
#include "cpu.h"

/* OpenBLAS's own allocator of those buffers (exported, not in its headers): absent, another BLAS */
extern void *blas_memory_alloc(int procpos) __attribute__((weak));
extern void blas_memory_free(void *area) __attribute__((weak));

/* BUFFER_SIZE of Debian's OpenBLAS 0.3.21 (its mappings, seen under strace), and room for what the
 * first calls of a thread take beside it (its stack, a malloc arena) */
#define BLAS_BUFFER ((size_t)128 << 20)
#define BLAS_THREAD_SLACK ((size_t)80 << 20)

/* the soft limit on `resource`, or 0 when there is none */
static rlim_t limit_of(int resource)
{
    struct rlimit r;
    return !getrlimit(resource, &r) && r.rlim_cur != RLIM_INFINITY ? r.rlim_cur : 0;
}

void cpu_blas_process(char **argv)
{
    /* the kernels call OpenBLAS one GEMM per thread of their own: its pool is never used, and with
     * OPENBLAS_NUM_THREADS=1 its constructor starts none. The environment is read only there, so
     * the process starts again with it. */
    if (getenv("OPENBLAS_NUM_THREADS") || !(limit_of(RLIMIT_AS) || limit_of(RLIMIT_DATA)))
        return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0)
        execv("/proc/self/exe", argv);
    /* no /proc, or no exec: go on as before (a limit this tight may still hang at exit) */
}

int cpu_blas_reserve(int threads)
{
    /* A buffer for each thread that may call at once, taken now, while a limit can still be met
     * with an error; the buffers stay with the library, and later calls (from any thread) take
     * them from there. Held all at once, so that each is a buffer of its own: GEMMs run by the
     * threads in turn would share the first, leaving the second to a later GEMM that overlaps. */
    size_t need = (size_t)threads * (BLAS_BUFFER + BLAS_THREAD_SLACK);
    void *room = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (room == MAP_FAILED) {
        rlim_t as = limit_of(RLIMIT_AS), data = limit_of(RLIMIT_DATA);
        err_set(
            "out of memory for OpenBLAS's work buffers: %d threads x %zu MiB (%zu MiB of address "
            "space with their stacks) beyond what is in use, under a limit of %llu MiB (%s)",
            threads, BLAS_BUFFER >> 20, need >> 20, (unsigned long long)((as ? as : data) >> 20),
            as ? "ulimit -v" : "ulimit -d");
        return -1;
    }
    munmap(room, need);
    if (blas_memory_alloc && blas_memory_free) {
        void *held[256];
        int n = threads < 256 ? threads : 256;
        for (int i = 0; i < n; i++)
            held[i] = blas_memory_alloc(0);
        for (int i = 0; i < n; i++)
            blas_memory_free(held[i]);
        return 0;
    }
    static const float a[64 * 64];
#pragma omp parallel num_threads(threads)
    {
        float c[64 * 64];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 64, 1.0f, a, 64, a, 64, 0.0f,
                    c, 64);
    }
    return 0;
}
