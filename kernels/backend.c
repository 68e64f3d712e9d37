#include "backend.h"

#include <string.h>

#include "cpu/cpu.h"
#include "err.h"

kb_backend *kb_create(const char *device, int threads)
{
    if (!strcmp(device, "cpu") || !strcmp(device, "auto"))
        return cpu_backend_create(threads);
    if (!strcmp(device, "cuda")) {
        err_set("--device cuda: this build has no CUDA backend");
        return NULL;
    }
    err_set("--device: unknown device '%s' (expected auto, cpu or cuda)", device);
    return NULL;
}
