/* What kvchat bench (app/cmd/bench.c) takes from its --turns, --attention and --policy modes
 * (app/cmd/bench_turns.c, bench_reading.c, bench_policy.c): the modes, and the median they also
 * use. One way: they call nothing else in bench.c. */
#ifndef KVCHAT_BENCH_H
#define KVCHAT_BENCH_H

#include "../options.h"

double bench_median(double *v, int n);
/* kvchat bench --turns */
int bench_turns(loaded_model *lm, const model_opts *mo, const char *json_path);
/* kvchat bench --attention: decode tok/s with the attention probe off and on, at each context */
int bench_reading(loaded_model *lm, const int *ctx, int n_ctx, int runs);
/* kvchat bench --policy: KL and top-1 of oldest-first and least-read against no eviction */
int bench_policy(loaded_model *lm, const model_opts *mo, const char *messages, const char *json);

#endif
