/* What bench --policy's files share (bench_policy.c: the runs, one rule in one window each, fed
 * the same conversations; policy_report.c: the table, the gate and the header's files). Nothing
 * else includes it. */
#ifndef KVCHAT_BENCH_POLICY_H
#define KVCHAT_BENCH_POLICY_H

#include <jansson.h>
#include <stdint.h>

#include "../chat/engine.h"
#include "bench_stats.h"
#include "policy_gates.h"

enum { FULL, OLDEST, SINKS, LEAST, LAST, RANDOM, ORACLE, SHIFT, N_RULES };
extern const char *const RULE[N_RULES]; /* each rule's name */

/* one conversation's cost for one run, and its recall answer: its log-probability, and whether
 * each of its tokens was the most likely one */
typedef struct {
    long evictions, recomputed;
    double evict_ms, answer_lp;
    int asked, answered; /* the question fitted the model's positions; its answer all top-1 */
    int fact_evicted;    /* recall: the fact's turn had left the window by the answer's end */
} conv_cost;

/* one rule in one window: its pool, engine and conversation, and what it measured */
typedef struct {
    int rule, window;
    engine_opts eo;
    kv_pool *pool;
    engine *e;
    int conv;
    int k;             /* this reply's tokens so far: the index of its next logits */
    int at;            /* the conversation's reply tokens so far */
    int *prev, n_prev; /* the window at the last reply token */
    double worst_ms;   /* its longest eviction */
    double reply_nll;  /* this reply's loss, and whether each of its tokens was the top one */
    int reply_top;
    bs_sums *units; /* per conversation, over the reply tokens whose window had lost history */
    conv_cost *costs;
    bs_values kls;
    json_t *kl, *top1, *windows; /* the conversation in progress's, per token */
} run;

typedef struct {
    loaded_model *lm;
    model_opts mo; /* -n: the longest given reply and its end */
    run *runs;
    int n_runs, V, cap, eos, keep;
    double *lp_rows; /* the whole-history run's log-softmax, one row per reply token */
    int *top_full;   /* its most likely token at each of them */
    int *full_len;   /* and its window */
    int *ids, n_ids; /* the reply's tokens (given, or drawn by the whole-history run) */
    size_t ids_cap;
    int forced; /* the reply is given */
    run *active;
    double *lp;
    int u;        /* the conversation in progress */
    uint64_t rng; /* the random rule's ranks */
    json_t *reply_ids, *full_windows;
} bench;

/* the table of the rules in window (n_convs conversations; recall: the answers' figures too), its
 * rows onto rules and its gate onto gates; each rule ranked against oldest-first only where the
 * model's gates (mg) and the random turn's against the oracle hold and the intervals part */
int policy_summary(bench *b, int window, int n_convs, int recall, const policy_gates *mg,
                   json_t *rules, json_t *gates);
/* path's SHA-256 and where it came from, for the header */
void policy_print_file(const char *path);

#endif
