/* Command-line parsing shared by the subcommands, and loading what they share (model, tokenizer,
 * backend). Usage errors exit 2, runtime errors 1; main.c prints the message. */
#ifndef KVCHAT_OPTIONS_H
#define KVCHAT_OPTIONS_H

#include <stddef.h>

#include "../kernels/backend.h"
#include "../model/gpt2.h"
#include "../model/sampler.h"
#include "../model/tokenizer.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef struct {
    const char *model_dir;   /* NULL: $KVCHAT_MODEL, else the download cache */
    const char *device;
    dtype wtype;
    int threads;
    int n_predict;
    sampler_params sp;
} model_opts;

void model_opts_init(model_opts *o);
/* Consumes argv[*i] (and its value) if it is a shared option: 1 if consumed, 0 if not, -1 on error. */
int model_opts_parse(model_opts *o, int argc, char **argv, int *i);
/* The help lines for those options. */
extern const char MODEL_OPTS_HELP[];
extern const char SAMPLING_OPTS_HELP[];

/* argv[*i] is FLAG or FLAG=VALUE: sets *value and advances *i; 1 if matched, 0 if not, -1 if the
 * value is missing. Either name may be NULL. */
int opt_match(int argc, char **argv, int *i, const char *shortname, const char *longname, const char **value);
int opt_int(const char *flag, const char *s, long lo, long hi, int *out);
int opt_float(const char *flag, const char *s, double lo, double hi, float *out);
int opt_u64(const char *flag, const char *s, unsigned long long *out);

/* ${XDG_CACHE_HOME:-~/.cache}/kvchat/models/NAME */
int model_cache_dir(char *buf, size_t n, const char *name);
const char *resolve_model_dir(const model_opts *o, char *buf, size_t n);

typedef struct {
    gpt2_model model;
    tokenizer *tok;
    kb_backend *backend;
    char dir[4096];
} loaded_model;

int load_model(loaded_model *lm, const model_opts *o);
void unload_model(loaded_model *lm);

#endif
