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

/* one conversation's cost for one run, and where its recall question stood */
typedef struct {
    long evictions, recomputed;
    double evict_ms;
    int asked;        /* recall: the question fitted the model's positions */
    int fact_evicted; /* recall: the fact's turn had left the window by the answer's end */
} conv_cost;

/* the whole-history run at a reply token: its distribution's figures, the reply token's
 * log-probability, its window's length */
typedef struct {
    bs_ref d;
    double lp;
    int len;
} full_token;

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
    double reply_nll;  /* this reply's loss */
    bs_sums *units;    /* per conversation, over the reply tokens whose window had lost history */
    bs_sums *fills; /* recall, per conversation: the answer's fill tokens (n), top-1 right (top1) */
    conv_cost *costs;
    bs_values kls;
    json_t *kl, *top1, *windows; /* the conversation in progress's, per token */
} run;

typedef struct {
    loaded_model *lm;
    model_opts mo; /* -n: the longest given reply and its end */
    run *runs;
    int n_runs, V, cap, eos, keep;
    double *p_rows;   /* the whole-history run's distribution, one row per reply token */
    full_token *full; /* and its figures at each */
    int *ids, n_ids;  /* the reply's tokens (given, or drawn by the whole-history run) */
    size_t ids_cap;
    int forced; /* the reply is given */
    run *active;
    int u;                  /* the conversation in progress */
    unsigned char *is_fill; /* the reply in progress: which tokens hold a recall answer's fill */
    uint64_t rng;           /* the random rule's ranks */
    json_t *reply_ids, *full_windows;
} bench;

/* the table of the rules in window (n_convs conversations; recall: the answers' figures too), its
 * rows onto rules and its gate onto gates; each rule ranked against oldest-first only where the
 * model's gates (mg) and the random turn's against the oracle hold and the interval of its
 * difference from oldest-first, paired over the conversations, leaves out zero */
int policy_summary(bench *b, int window, int n_convs, int recall, const policy_gates *mg,
                   json_t *rules, json_t *gates);
/* path's SHA-256 and where it came from, for the header */
void policy_print_file(const char *path);

#endif
