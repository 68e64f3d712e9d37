/* The GPU self-test: before a GPU is first used with a model, the model runs a fixed prompt and a few
 * decode steps there and on the CPU (the reference, in the same weight dtype) and their logits are
 * compared at every step. A GPU that disagrees is never used silently: `--device auto` warns and
 * runs on the CPU, `--device cuda` fails naming the gap. Verdicts are cached per GPU, driver, model
 * and weight dtype in ${XDG_CACHE_HOME:-~/.cache}/kvchat/selftest.json, so later starts pay nothing. */
#ifndef KVCHAT_SELFTEST_H
#define KVCHAT_SELFTEST_H

#include "options.h"

typedef struct {
    double worst;     /* the largest relative L2 error of the device's logits against the CPU's */
    double limit;     /* what the weight dtype allows */
    int steps;        /* logits compared: the prefill's, then one per decode step */
    int passed;
    int cached;       /* the verdict came from the cache */
} selftest_result;

/* The largest error a correct device shows in this weight dtype (see selftest.c for the figures). */
double selftest_limit(dtype weights);
/* Runs the test for the model as loaded on its backend (a CPU copy is loaded from lm->dir). */
int selftest_run(loaded_model *lm, selftest_result *r);
/* The first-use gate, called by load_model on a GPU: the cached verdict, else a run (and its verdict
 * cached). On a failed test, `auto` reloads lm on the CPU (saying why in one line) and `cuda` fails
 * naming the gap. KVCHAT_SELFTEST=0 skips it (for diagnosing a GPU). */
int selftest_gate(loaded_model *lm, const model_opts *o);
/* The cache key of this model on this backend, or -1 on the CPU (no device to key). */
int selftest_key(loaded_model *lm, char *buf, size_t n);

#endif
