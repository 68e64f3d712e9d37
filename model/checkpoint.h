/* A model directory's weights file: model.safetensors when it has one (mapped in place), else
 * pytorch_model.bin (read without pickle, model/pytorch.h). */
#ifndef KVCHAT_CHECKPOINT_H
#define KVCHAT_CHECKPOINT_H

#include "safetensors.h"

/* The weights file's name inside DIR, or NULL with an error naming both when neither is there. */
const char *ckpt_file(const char *dir);
/* Opens PATH as the format its name says; errors name the file. */
int ckpt_open(st_file *f, const char *path);

#endif
