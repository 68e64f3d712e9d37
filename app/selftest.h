/* The GPU self-test: before a GPU is first used with a model, the model runs a fixed prompt and a
 * few decode steps there and on the CPU (the reference, in the same weight dtype) and their logits
 * are compared at every step. A GPU that disagrees is never used silently: `--device auto` warns
 * and runs on the CPU, `--device cuda` fails naming the gap. A GPU's fast kernels are tried first,
 * then its basic ones (the previous release's), so a fast kernel wrong on some GPU costs speed,
 * never correctness. Verdicts are cached per GPU, driver, model, weight and cache dtype and kernel
 * set in ${XDG_CACHE_HOME:-~/.cache}/kvchat/selftest.json, so later starts pay nothing. */
#ifndef KVCHAT_SELFTEST_H
#define KVCHAT_SELFTEST_H

#include "options.h"

typedef struct {
    double worst; /* the largest relative L2 error of the device's logits against the CPU's */
    double limit; /* what the weight dtype allows */
    int steps;    /* logits compared: the prefill's, then one per decode step */
    int passed;
    int cached; /* the verdict came from the cache */
} selftest_result;

/* The largest error a correct device shows in these weight and cache dtypes (see selftest.c for the
 * figures). */
double selftest_limit(dtype weights, dtype cache);
/* The relative L2 distance of n logits x from the reference's */
double selftest_error(const float *x, const float *ref, int n);
/* Runs the test for the model as loaded on its backend (a CPU copy is loaded from lm->dir). */
int selftest_run(loaded_model *lm, selftest_result *r);
/* The same against ref, the model already placed on the CPU backend cpu in lm's weight dtype. */
int selftest_against(loaded_model *lm, gpt2_model *ref, kb_backend *cpu, selftest_result *r);
/* The first-use gate, called by selftest_load on a GPU: for each kernel set to try, the cached
 * verdict, else a run (and its verdict cached); the first set that passes stays in use (a fallback
 * to the basic set is said in one line). When none passes, `auto` reloads lm on the CPU (saying why
 * in one line) and `cuda` fails naming the gap. KVCHAT_SELFTEST=0 skips it (for diagnosing a GPU).
 */
int selftest_gate(loaded_model *lm, const model_opts *o);
/* load_model, then the gate (unless o->skip_selftest): a GPU never tested with this model is
 * checked against the CPU first, and a failure reloads on the CPU, or is the error. What every
 * command that runs a model loads it with. */
int selftest_load(loaded_model *lm, const model_opts *o);
/* The kernel sets to try, in order, into sets (2 at most): the one asked for, else fast then basic
 * (one where the backend has no sets). Returns how many. */
int selftest_candidates(const loaded_model *lm, const model_opts *o, kb_kernels *sets);
/* Kernel set k's verdict: the cached one (use_cache, when one is kept), else a run, kept for next
 * time; -1 when the test could not run. */
int selftest_verdict(loaded_model *lm, kb_kernels k, int use_cache, selftest_result *r);
/* The cache key of this model on this backend, or -1 on the CPU (no device to key). */
int selftest_key(loaded_model *lm, char *buf, size_t n);

#endif
