/* Tiny random checkpoints generated once per test run (in the run's temporary directory). */
#ifndef KVCHAT_MODEL_FIXTURE_H
#define KVCHAT_MODEL_FIXTURE_H

#include "../../model/speculate.h"

/* DIR of a 4-head, 32-wide checkpoint of `layers` layers, context ctx and make-tiny-model's seed
 * (one of fewer layers from the same seed shares the embeddings, so its choices overlap: a
 * drafter's), its first `vocab` ids (0: GPT-2's 50257), weights in dtype_name. */
const char *fixture_checkpoint(int layers, int ctx, int seed, int vocab, const char *dtype_name);
/* the same with its heads and width chosen (fixture_checkpoint's: 4 heads of 8) */
const char *fixture_shaped(int layers, int heads, int embd, int ctx, int seed, int vocab,
                           const char *dtype_name);
/* DIR of a 2-layer checkpoint with context `ctx` (seed 3), weights in `dtype_name`. */
const char *fixture_model(const char *dtype_name, int ctx);

/* n_predict tokens after prompt[0..n), as kvchat generate makes them, on backend b: plain steps (d
 * NULL) or speculative rounds through d; the ids into out. stats: the rounds' (NULL: plain) */
int fixture_decode(gpt2_model *m, kb_backend *b, kv_pool *pool, drafter *d,
                   const sampler_params *sp, const int *prompt, int n, int n_predict, int *out,
                   spec_stats *stats);

#endif
