#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "cpu/cpu.h"
#include "err.h"
#ifdef KVCHAT_CUDA
#include "cuda/cuda.h"
#endif
#if defined(KVCHAT_CUDA) && !defined(KVCHAT_CUDA_EMU)
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>
#pragma weak cuda_backend_create

/* The CUDA backend linked in (the unit tests), else libkvchat-cuda.so, loaded at the first use of a
 * GPU from beside the binary (a build, the bundle) or PREFIX/lib/kvchat (make install): a CPU run
 * maps neither it nor the CUDA libraries it links. */
static kb_backend *cuda_create(void)
{
    if (cuda_backend_create)
        return cuda_backend_create();
    char exe[PATH_MAX], path[PATH_MAX + 64], first[512] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    static const char *const places[] = {"%s/libkvchat-cuda.so",
                                         "%s/../lib/kvchat/libkvchat-cuda.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof places / sizeof *places && !lib; i++) {
        snprintf(path, sizeof path, places[i], slash ? exe : ".");
        if (!(lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) && !first[0])
            snprintf(first, sizeof first, "%s", dlerror());
    }
    kb_backend *(*create)(void) = NULL;
    if (lib)
        *(void **)&create = dlsym(lib, "cuda_backend_create");
    if (!create) {
        err_set("the CUDA backend did not load: %s", lib ? dlerror() : first);
        return NULL;
    }
    return create();
}
#elif defined(KVCHAT_CUDA)
static kb_backend *cuda_create(void) { return cuda_backend_create(); }
#endif

static char fallback[512];

const char *kb_fallback_reason(void) { return fallback[0] ? fallback : NULL; }

const char *kb_devices_built(void)
{
#ifdef KVCHAT_CUDA
    return "cpu, cuda";
#else
    return "cpu";
#endif
}

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
    kb_backend *b = cuda_create();
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
