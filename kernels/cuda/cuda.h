/* The CUDA backend: the same contracts as kernels/cpu/ (its reference), on an NVIDIA GPU. */
#ifndef KVCHAT_CUDA_H
#define KVCHAT_CUDA_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NULL (with the reason) when there is no usable GPU: no device, a driver too old, no memory. */
kb_backend *cuda_backend_create(void);
/* The error for a driver too old for this build's runtime (versions as 1000 * major + 10 * minor;
 * 0: no driver): -1, with a message that says what to do. */
int cuda_driver_problem(int driver, int runtime);
/* how many decode steps replayed a recorded CUDA graph (the tests check that recording works) */
long cuda_graph_replays(kb_backend *b);
/* The last sample call's integer probabilities q[vocab] and the threshold it kept ids above (for
 * the tests: its top-k/top-p selection against cpu_sample_floor on the same q). */
int cuda_sample_kept(kb_backend *b, unsigned *q, int vocab, unsigned *floor_q);

#ifdef __cplusplus
}
#endif

#endif
