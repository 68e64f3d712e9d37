/* bench --policy's oracle: before a turn whose reply an eviction will cut into the window, it tries
 * every turn that eviction may take first, each trial in an engine of its own with the window
 * restored and the reply teacher-forced, and ranks first the turn after whose loss the reply's
 * moves least from the whole-history run's (then the oldest): the bound the other rules are
 * measured against. Its ranks go to the engine through engine_rank (WIN_RANKED). */
#ifndef KVCHAT_BENCH_ORACLE_H
#define KVCHAT_BENCH_ORACLE_H

#include "../chat/engine.h"

typedef struct {
    loaded_model *lm;
    const model_opts *mo;
    const engine_opts *eo; /* the oracle run's */
    const kv_opts *kv;     /* its pool's */
    int keep;              /* the template's preamble */
    const int *reply;      /* the reply every run takes, its end included */
    int n_reply, eos;
} oracle_turn;

/* ranks[0..n turns) of conversation conv of e for this turn: by age when no eviction comes in it
 * (the window's tokens, the message's and the reply's within `window`), else the oracle's choice
 * first. 0, or -1 with the error. */
int oracle_ranks(const oracle_turn *o, engine *e, int conv, const char *msg, int message_tokens,
                 int window, double full_nll, float *ranks);

#endif
