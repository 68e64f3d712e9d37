#include "checkpoint.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../kernels/err.h"
#include "pytorch.h"

static const char *const FILES[] = {"model.safetensors", "pytorch_model.bin"};

const char *ckpt_file(const char *dir)
{
    char path[PATH_MAX];
    struct stat sb;
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        if (!stat(path, &sb) && S_ISREG(sb.st_mode))
            return FILES[i];
    }
    err_set("%s: no model.safetensors or pytorch_model.bin (get one with kvchat get-model, or make "
            "a test model "
            "with kvchat make-tiny-model)",
            dir);
    return NULL;
}

int ckpt_open(st_file *f, const char *path)
{
    size_t len = strlen(path);
    return len >= 4 && !strcmp(path + len - 4, ".bin") ? pt_open(f, path) : st_open(f, path);
}
