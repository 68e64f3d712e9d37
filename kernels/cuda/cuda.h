/* The CUDA backend: the same contracts as kernels/cpu/ (its reference), on an NVIDIA GPU. */
#ifndef KVCHAT_CUDA_H
#define KVCHAT_CUDA_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL (with the reason) when there is no usable GPU: no device, a driver too old, no memory. */
kb_backend *cuda_backend_create(void);
/* how many decode steps replayed a recorded CUDA graph (the tests check that recording works) */
long cuda_graph_replays(kb_backend *b);

#ifdef __cplusplus
}
#endif

#endif
