/* Choosing the next token from logits: repetition penalty, temperature, top-k, top-p, seeded. */
#ifndef KVCHAT_SAMPLER_H
#define KVCHAT_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temp;            /* 0: greedy */
    int top_k;             /* 0: off */
    float top_p;           /* 1: off */
    float repeat_penalty;  /* 1: off; > 1 discourages ids already in the context (CTRL/HF rule) */
    uint64_t seed;
} sampler_params;

typedef struct {
    sampler_params p;
    uint64_t rng;
    int vocab;
    float *prob;           /* scratch: vocab floats */
    int *idx;              /* scratch: vocab ints */
    unsigned char *seen;   /* scratch: vocab flags for the penalty */
} sampler;

sampler_params sampler_defaults(void);
int sampler_init(sampler *s, const sampler_params *p, int vocab);
void sampler_free(sampler *s);
/* Picks an id from logits (modified in place); history are the ids already in the context. */
int sampler_next(sampler *s, float *logits, const int *history, int n_history);

#endif
