/* What kvchat bench (app/cmd/bench.c) takes from its --turns mode (app/cmd/bench_turns.c): the
 * mode, and the median it also uses. One way: bench_turns.c calls nothing in bench.c. */
#ifndef KVCHAT_BENCH_H
#define KVCHAT_BENCH_H

#include "../options.h"

double bench_median(double *v, int n);
/* kvchat bench --turns */
int bench_turns(loaded_model *lm, const model_opts *mo, const char *json_path);

#endif
