/* The sampling settings and their seeded stream of draws; the choice itself runs on the backend
 * (kb_backend.sample, rule in kernels/cpu/sample.c), next to the logits. */
#ifndef KVCHAT_SAMPLER_H
#define KVCHAT_SAMPLER_H

#include <stdint.h>

#include "../kernels/backend.h"

typedef struct {
    float temp;           /* 0: greedy */
    int top_k;            /* 0: off */
    float top_p;          /* 1: off */
    float repeat_penalty; /* 1: off; > 1 discourages ids already in the context (CTRL/HF rule) */
    uint64_t seed;
} sampler_params;

typedef struct {
    sampler_params p;
    uint64_t rng; /* advances once per token chosen */
} sampler;

sampler_params sampler_defaults(void);
int sampler_params_equal(const sampler_params *a, const sampler_params *b);
void sampler_init(sampler *s, const sampler_params *p);
/* The next token's request: the settings, the next draw of the stream, and the history for the
 * penalty. */
kb_sample sampler_draw(sampler *s, const int *history, int n_history);

#endif
