/* The fidelity check: the next-token distribution the cached pass gives against a fresh prefill of
 * the same window in a private contiguous cache (top-1 agreement and KL, as a fidelity event). It
 * shows that exact eviction leaves the model's view unchanged and how far a shift eviction drifts.
 */
#ifndef KVCHAT_FIDELITY_H
#define KVCHAT_FIDELITY_H

#include "runtime.h"

typedef struct {
    kv_pool *pool;         /* made on the first check, sized for the window */
    float *cached, *fresh; /* [vocab] logits */
} fidelity;

/* 0, or -1 with the error. */
int fid_init(fidelity *f, int vocab);
void fid_free(fidelity *f);
struct conv;
/* Checks c's last position, once c's cache has just run it; a failure skips the check (it changes
 * nothing the conversation depends on). */
void fid_check(fidelity *f, loaded_model *lm, struct conv *c, int window);

#endif
