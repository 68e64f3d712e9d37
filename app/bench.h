/* Shared by the benchmark modes. */
#ifndef KVCHAT_BENCH_H
#define KVCHAT_BENCH_H

#include "options.h"

double bench_median(double *v, int n);
/* kvchat bench --turns */
int bench_turns(loaded_model *lm, const model_opts *mo, const char *json_path);

#endif
