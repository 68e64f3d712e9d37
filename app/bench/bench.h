/* What kvchat bench (app/bench/bench.c) takes from its --turns, --attention, --policy and
 * --speculative modes (app/bench/bench_turns.c, bench_reading.c, bench_policy.c, bench_spec.c): the
 * modes, and the median they also use (bench_stats.c). One way: they call nothing else in bench.c.
 */
#ifndef KVCHAT_BENCH_H
#define KVCHAT_BENCH_H

#include "../options.h"

double bench_median(double *v, int n);
/* kvchat bench --turns */
int bench_turns(loaded_model *lm, const model_opts *mo, const char *json_path);
/* kvchat bench --attention: decode tok/s with the attention probe off and on, at each context */
int bench_reading(loaded_model *lm, const int *ctx, int n_ctx, int runs);
/* kvchat bench --policy: KL and top-1 of oldest-first and least-read against no eviction */
int bench_policy(loaded_model *lm, const model_opts *mo, const char *messages, const char *chats,
                 const char *recall, const char *gate_text, const char *gate_recall,
                 const char *json);
/* kvchat bench --policy --text: kvchat's rules and the literature's token-level ones on documents
 * of a held-out text, at budgets of 12.5%, 25% and 50% of the model's positions; seed: the
 * bootstrap's */
int bench_text(loaded_model *lm, const char *path, const char *gate_recall, int n_docs,
               const char *json, uint64_t seed);

/* kvchat bench --speculative: each drafter of the comma-separated list against plain decoding,
 * on the fixed prompt or on each chat of chats (JSON lines), runs times alternating */
int bench_speculative(loaded_model *lm, const model_opts *mo, const char *drafters,
                      const draft_opts *base, const char *chats, int runs, const char *json_path);

#endif
