/* What a command runs on: the options a model is loaded with, and the loaded model with its
 * tokenizer, backend, event bus and KV pool. The command line fills model_opts (app/options.c); the
 * engine, the benchmarks and the self-test take the loaded model. */
#ifndef KVCHAT_RUNTIME_H
#define KVCHAT_RUNTIME_H

#include <stddef.h>

#include "../../kernels/backend.h"
#include "../../model/draft.h"
#include "../../model/events.h"
#include "../../model/gpt2.h"
#include "../../model/kvcache.h"
#include "../../model/sampler.h"
#include "../../model/tokenizer.h"

typedef struct {
    const char *model_dir; /* NULL: $KVCHAT_MODEL, else the download cache */
    const char *device;
    dtype wtype;
    int wtype_set;      /* --dtype given (else bf16 on a GPU, the CPU's fastest on the CPU) */
    int kv_type_set;    /* --cache-dtype given (else bf16 on a GPU; on the CPU f32 with f32 weights,
                           else f16) */
    kb_kernels kernels; /* --gpu-kernels */
    int kernels_set;    /* given: the self-test tries that set alone (else fast, then basic) */
    int threads;
    int n_predict;
    sampler_params sp;
    kv_opts kv;        /* kv.window 0: the model's context */
    int skip_selftest; /* selftest_load skips the first-use GPU self-test (kvchat selftest runs it) */
    int verbose;       /* -v: say on stderr where it runs when a GPU was wanted and is not there */
} model_opts;

/* The defaults: $KVCHAT_DEVICE, the CPU's fastest weights, the sampler's and the cache's defaults.
 */
void model_opts_init(model_opts *o);

/* ${XDG_CACHE_HOME:-~/.cache}/kvchat/models/NAME */
int model_cache_dir(char *buf, size_t n, const char *name);
const char *resolve_model_dir(const model_opts *o, char *buf, size_t n);

typedef struct {
    gpt2_model model;
    tokenizer *tok;
    kb_backend *backend;
    ev_bus *bus;
    kv_pool *pool;
    kb_kernels kernels; /* the backend's kernel set in use (a GPU's) */
    char dir[4096];
} loaded_model;

/* switches lm's backend to kernel set k (where it has sets) */
void use_kernels(loaded_model *lm, kb_kernels k);
const char *kernels_name(kb_kernels k);

int load_model(loaded_model *lm, const model_opts *o);
void unload_model(loaded_model *lm);

#endif
