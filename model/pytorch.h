/* PyTorch checkpoints (pytorch_model.bin) read without running pickle: the zip archive torch >= 1.6
 * writes and the legacy stream of the 2019-2020 checkpoints, both into the same index of named
 * tensors a safetensors file gives (model/safetensors.h), each tensor contiguous. */
#ifndef KVCHAT_PYTORCH_H
#define KVCHAT_PYTORCH_H

#include <stddef.h>
#include <stdint.h>

#include "safetensors.h"

/* Indexes a whole file image held in memory (the fuzz target's entry); tensors point into buf, or
 * into buffers f owns when a storage had to be unpacked or a tensor gathered from its strides. */
int pt_parse(st_file *f, const uint8_t *buf, size_t len);
/* mmap()s PATH and parses it; errors name the file. */
int pt_open(st_file *f, const char *path);

#endif
