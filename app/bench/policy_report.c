/* bench --policy's report: each window's table of the rules (figures with their intervals, cost,
 * recall), the gate that says whether the rules can be told apart, and the header's files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../files.h"
#include "bench_convs.h"
#include "bench_policy.h"

/* the random control against the oracle, by mean KL: the rules are told apart only where the
 * control is worse beyond both intervals */
static int gate(const bs_row *random, const bs_row *oracle, int window)
{
    int holds = random->ci[BS_KL][0] > oracle->ci[BS_KL][1];
    printf("gate: the random turn (KL %.4f [%.4f, %.4f]) is worse than the oracle (%.4f [%.4f, "
           "%.4f]) beyond both intervals: %s\n",
           random->fig[BS_KL], random->ci[BS_KL][0], random->ci[BS_KL][1], oracle->fig[BS_KL],
           oracle->ci[BS_KL][0], oracle->ci[BS_KL][1], holds ? "holds" : "FAILS");
    if (!holds)
        printf("In the window of %d the rules' differences are noise.\n", window);
    return holds;
}

/* a rule against oldest-first (the default) by mean KL: ranked only where every gate holds and the
 * two intervals part */
static const char *verdict(int rule, const bs_row *rows, int hold)
{
    if (rule == OLDEST || rule == RANDOM || rule == ORACLE)
        return rule == OLDEST ? "(the default)" : rule == RANDOM ? "(the control)" : "(the bound)";
    return policy_rank(rows[rule].ci[BS_KL], rows[OLDEST].ci[BS_KL], hold,
                       "closer than oldest-first", "further than oldest-first");
}

/* recall: the share of the asked questions answered (every token the most likely one) */
typedef struct {
    const conv_cost *c;
    int n;
} answers;

static double answered_share(const void *ctx, const int *times)
{
    const answers *a = ctx;
    double right = 0, asked = 0;
    for (int u = 0; u < a->n; u++) {
        double t = times ? times[u] : 1;
        right += t * a->c[u].answered, asked += t * a->c[u].asked;
    }
    return asked ? right / asked : 0;
}

/* Per rule, over the questions that fitted the model's positions: the answers right, with their
 * interval, the chats whose fact's turn the rule had evicted by the answer's end, and the cost;
 * each rule's answers ranked against oldest-first's as its KL is */
static int recall_table(bench *b, int window, int n_convs, int hold, json_t *rules)
{
    printf("recall: the answers whose every token is the most likely one (95%% intervals over the "
           "questions), the chats whose fact's turn the rule evicted, the cost\n");
    printf("%-13s %-22s %13s %10s %8s\n", "rule", "answered [95%]", "fact evicted", "recomputed",
           "worst");
    double ci[N_RULES][2] = {{0}}, share[N_RULES] = {0};
    for (int i = 0; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        if (r->window != window && r->rule != FULL)
            continue;
        answers a = {r->costs, n_convs};
        long asked = 0, evicted = 0, rec = 0;
        for (int u = 0; u < n_convs; u++)
            asked += r->costs[u].asked, rec += r->costs[u].recomputed,
                evicted += r->costs[u].asked && r->costs[u].fact_evicted;
        share[r->rule] = answered_share(&a, NULL);
        if (bs_interval(answered_share, &a, n_convs, 2000, b->mo.sp.seed, ci[r->rule]))
            return -1;
        const char *v = "";
        if (r->rule != FULL && r->rule != OLDEST && r->rule != RANDOM && r->rule != ORACLE)
            v = policy_rank(ci[r->rule], ci[OLDEST], hold, "fewer than oldest-first",
                            "more than oldest-first");
        char c[64];
        snprintf(c, sizeof c, "%.1f%% [%.1f, %.1f]", 100 * share[r->rule], 100 * ci[r->rule][0],
                 100 * ci[r->rule][1]);
        printf("%-13s %-22s %5ld of %-5ld %10ld %6.1fms  %s\n", RULE[r->rule], c, evicted, asked,
               rec, r->worst_ms, v);
        if (r->rule == FULL)
            continue;
        for (size_t k = 0; k < json_array_size(rules); k++) {
            json_t *row = json_array_get(rules, k);
            if (json_integer_value(json_object_get(row, "window")) == window &&
                !strcmp(json_string_value(json_object_get(row, "rule")), RULE[r->rule]))
                json_object_set_new(row, "recall",
                                    json_pack("{s:f, s:[f,f], s:I, s:I, s:s}", "answered",
                                              share[r->rule], "answered_95", ci[r->rule][0],
                                              ci[r->rule][1], "asked", (json_int_t)asked,
                                              "fact_evicted", (json_int_t)evicted, "verdict", v));
        }
    }
    return 0;
}

int policy_summary(bench *b, int window, int n_convs, int recall, const policy_gates *mg,
                   json_t *rules, json_t *gates)
{
    bs_row rows[N_RULES];
    run *at[N_RULES] = {0};
    for (int i = 1; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        if (r->window != window)
            continue;
        if (bs_row_of(r->units, n_convs, &r->kls, b->mo.sp.seed, &rows[r->rule]))
            return -1;
        at[r->rule] = r;
    }
    printf("\nwindow %d of %d positions: over the reply tokens whose window had lost history "
           "(95%% intervals over the %d conversations)\n",
           window, b->lm->model.cfg.n_ctx, n_convs);
    int apart = gate(&rows[RANDOM], &rows[ORACLE], window), hold = mg->holds && apart;
    bs_row_head("rule");
    printf(" %9s %10s %9s %8s  %s\n", "evictions", "recomputed", "evicting", "worst", "verdict");
    for (int rule = 1; rule < N_RULES; rule++) {
        run *r = at[rule];
        if (!r)
            continue;
        long ev = 0, rec = 0;
        double ms = 0;
        for (int u = 0; u < n_convs; u++)
            ev += r->costs[u].evictions, rec += r->costs[u].recomputed, ms += r->costs[u].evict_ms;
        const char *v = verdict(rule, rows, hold);
        bs_row_print(RULE[rule], &rows[rule]);
        printf(" %9ld %10ld %7.0fms %6.1fms  %s\n", ev, rec, ms, r->worst_ms, v);
        json_array_append_new(rules,
                              json_pack("{s:s, s:i, s:b, s:o, s:I, s:I, s:f, s:f, s:s}", "rule",
                                        RULE[rule], "window", window, "approximate", rule == SHIFT,
                                        "figures", bs_row_json(&rows[rule]), "evictions",
                                        (json_int_t)ev, "recomputed", (json_int_t)rec, "evict_ms",
                                        ms, "worst_evict_ms", r->worst_ms, "verdict", v));
    }
    json_array_append_new(
        gates, json_pack("{s:i, s:b}", "window", window, "random_worse_than_oracle", apart));
    return recall ? recall_table(b, window, n_convs, hold, rules) : 0;
}

/* the file's SHA-256 and where it came from, for the header: a rerun can tell it ran on the same */
void policy_print_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    size_t len = 0;
    char *text = f ? read_all(f, &len, path) : NULL, hex[65];
    if (f)
        fclose(f);
    if (text) {
        sha256_hex(text, len, hex);
        printf(" (sha256 %.16s...)", hex);
    }
    free(text);
    printf("\n");
    bench_print_sources(path);
}
