/* bench --policy's report: each window's table of the rules (figures with their intervals, cost,
 * recall), the gate that says whether the rules can be told apart, and the header's files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../files.h"
#include "bench_convs.h"
#include "bench_policy.h"

/* the random control against the oracle: their paired difference of mean KL; the rules are told
 * apart only where the control is worse beyond its interval */
static int gate(bench *b, const run *random, const run *oracle, int n_convs, int window,
                const bs_row *rows, json_t *gates)
{
    double d, ci[2];
    if (bs_paired(random->units, oracle->units, n_convs, BS_KL, b->mo.sp.seed, &d, ci))
        return -1;
    int holds = ci[0] > 0;
    printf("gate: the random turn's mean KL (%.4f) minus the oracle's (%.4f) is %+.4f [95%% %+.4f, "
           "%+.4f], above 0: %s\n",
           rows[RANDOM].fig[BS_KL], rows[ORACLE].fig[BS_KL], d, ci[0], ci[1],
           holds ? "holds" : "FAILS");
    if (!holds)
        printf("In the window of %d the rules' differences are noise.\n", window);
    json_array_append_new(gates,
                          json_pack("{s:i, s:b, s:o}", "window", window, "random_worse_than_oracle",
                                    holds, "random_minus_oracle", bs_paired_json(d, ci)));
    return holds;
}

/* a rule against oldest-first (the default), by the paired difference in diff */
static const char *verdict(int rule, const double diff[2], int hold, const char *below,
                           const char *above)
{
    if (rule == FULL || rule == OLDEST || rule == RANDOM || rule == ORACLE)
        return rule == OLDEST   ? "(the default)"
               : rule == RANDOM ? "(the control)"
               : rule == ORACLE ? "(the bound)"
                                : "";
    return policy_rank(diff, hold, below, above);
}

/* Per rule, over the questions that fitted the model's positions: the answers' fill tokens that
 * were the most likely one, with their interval and their difference from oldest-first's (paired
 * over the chats), the chats whose fact's turn the rule had evicted by the answer's end, and the
 * cost */
static int recall_table(bench *b, int window, const run *oldest, int n_convs, int hold,
                        json_t *rules)
{
    printf("recall: the answers' fill tokens that were the most likely one (95%% intervals over "
           "the chats; the difference from oldest-first paired over them), the chats whose "
           "fact's turn the rule evicted, the cost\n");
    printf("%-13s %-22s %-27s %13s %10s %8s\n", "rule", "fill top-1 [95%]", "- oldest-first [95%]",
           "fact evicted", "recomputed", "worst");
    for (int i = 0; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        if (r->window != window && r->rule != FULL)
            continue;
        long asked = 0, evicted = 0, rec = 0, tokens = 0;
        for (int u = 0; u < n_convs; u++)
            asked += r->costs[u].asked, rec += r->costs[u].recomputed,
                evicted += r->costs[u].asked && r->costs[u].fact_evicted, tokens += r->fills[u].n;
        double share, ci[2], d, dci[2];
        if (bs_paired(r->fills, NULL, n_convs, BS_TOP1, b->mo.sp.seed, &share, ci) ||
            bs_paired(r->fills, oldest->fills, n_convs, BS_TOP1, b->mo.sp.seed, &d, dci))
            return -1;
        const char *v = verdict(r->rule, dci, hold, "fewer right than oldest-first",
                                "more right than oldest-first");
        char c[64], dc[64];
        snprintf(c, sizeof c, "%.1f%% [%.1f, %.1f]", share, ci[0], ci[1]);
        bs_diff_cell(dc, sizeof dc, d, dci, 1, 1);
        printf("%-13s %-22s %-27s %5ld of %-5ld %10ld %6.1fms  %s\n", RULE[r->rule], c,
               r->rule == FULL ? "" : dc, evicted, asked, rec, r->worst_ms, v);
        if (r->rule == FULL)
            continue;
        for (size_t k = 0; k < json_array_size(rules); k++) {
            json_t *row = json_array_get(rules, k);
            if (json_integer_value(json_object_get(row, "window")) == window &&
                !strcmp(json_string_value(json_object_get(row, "rule")), RULE[r->rule]))
                json_object_set_new(
                    row, "recall",
                    json_pack("{s:o, s:[o,o], s:I, s:o, s:I, s:I, s:s}", "fill_top1",
                              bs_json_number(share / 100), "fill_top1_95",
                              bs_json_number(ci[0] / 100), bs_json_number(ci[1] / 100),
                              "fill_tokens", (json_int_t)tokens, "vs_default",
                              bs_paired_json(d / 100, (double[2]){dci[0] / 100, dci[1] / 100}),
                              "asked", (json_int_t)asked, "fact_evicted", (json_int_t)evicted,
                              "verdict", v));
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
           "(95%% intervals over the %d conversations; the difference from oldest-first paired "
           "over them)\n",
           window, b->lm->model.cfg.n_ctx, n_convs);
    int apart = gate(b, at[RANDOM], at[ORACLE], n_convs, window, rows, gates);
    if (apart < 0)
        return -1;
    int hold = mg->holds && apart;
    bs_row_head("rule");
    printf(" %-27s %9s %10s %9s %8s  %s\n", "KL - oldest-first [95%]", "evictions", "recomputed",
           "evicting", "worst", "verdict");
    for (int rule = 1; rule < N_RULES; rule++) {
        run *r = at[rule];
        if (!r)
            continue;
        long ev = 0, rec = 0;
        double ms = 0, d, ci[2];
        for (int u = 0; u < n_convs; u++)
            ev += r->costs[u].evictions, rec += r->costs[u].recomputed, ms += r->costs[u].evict_ms;
        if (bs_paired(r->units, at[OLDEST]->units, n_convs, BS_KL, b->mo.sp.seed, &d, ci))
            return -1;
        const char *v =
            verdict(rule, ci, hold, "closer than oldest-first", "further than oldest-first");
        char dc[64];
        bs_diff_cell(dc, sizeof dc, d, ci, 1, 4);
        bs_row_print(RULE[rule], &rows[rule]);
        printf(" %-27s %9ld %10ld %7.0fms %6.1fms  %s\n", dc, ev, rec, ms, r->worst_ms, v);
        json_array_append_new(
            rules, json_pack("{s:s, s:i, s:b, s:o, s:o, s:I, s:I, s:f, s:f, s:s}", "rule",
                             RULE[rule], "window", window, "approximate", rule == SHIFT, "figures",
                             bs_row_json(&rows[rule]), "kl_vs_default", bs_paired_json(d, ci),
                             "evictions", (json_int_t)ev, "recomputed", (json_int_t)rec, "evict_ms",
                             ms, "worst_evict_ms", r->worst_ms, "verdict", v));
    }
    return recall ? recall_table(b, window, at[OLDEST], n_convs, hold, rules) : 0;
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
