#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"
#include "err.h"
#ifdef KVCHAT_CUDA
#include "cuda/cuda.h"
#endif

static char fallback[512];

const char *kb_fallback_reason(void) { return fallback[0] ? fallback : NULL; }

void kb_process_start(char **argv) { cpu_blas_process(argv); }

kb_backend *kb_create(const char *device, int threads)
{
    if (!strcmp(device, "cpu"))
        return cpu_backend_create(threads);
    if (strcmp(device, "cuda") && strcmp(device, "auto")) {
        err_set("--device: unknown device '%s' (expected auto, cpu or cuda)", device);
        return NULL;
    }
#ifdef KVCHAT_CUDA
    kb_backend *b = cuda_backend_create();
    if (b)
        return b;
    if (!strcmp(device, "cuda")) {
        err_wrap("--device cuda: no usable GPU");
        return NULL;
    }
    snprintf(fallback, sizeof fallback, "%s", err_msg());
#else
    if (!strcmp(device, "cuda")) {
        err_set(
            "--device cuda: this build has no CUDA backend (nvcc was not found when it was built)");
        return NULL;
    }
#endif
    return cpu_backend_create(threads);
}
