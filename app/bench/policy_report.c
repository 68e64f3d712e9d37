/* bench --policy's report: each window's table of the rules (figures with their intervals, cost,
 * recall), the gate that says whether the rules can be told apart, and the header's files. */
#include <stdio.h>
#include <stdlib.h>

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

int policy_summary(bench *b, int window, int n_convs, int recall, json_t *rules, json_t *gates)
{
    bs_row rows[N_RULES];
    printf("\nwindow %d of %d positions: over the reply tokens whose window had lost history "
           "(95%% intervals over the %d conversations)\n",
           window, b->lm->model.cfg.n_ctx, n_convs);
    bs_row_head("rule");
    printf(" %9s %10s %9s %8s\n", "evictions", "recomputed", "evicting", "worst");
    for (int i = 1; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        if (r->window != window)
            continue;
        long ev = 0, rec = 0, answered = 0, asked = 0;
        double ms = 0, lp = 0;
        for (int u = 0; u < n_convs; u++) {
            ev += r->costs[u].evictions, rec += r->costs[u].recomputed;
            ms += r->costs[u].evict_ms, lp += r->costs[u].answer_lp;
            answered += r->costs[u].answered, asked += r->costs[u].asked;
        }
        if (bs_row_of(r->units, n_convs, &r->kls, b->mo.sp.seed, &rows[r->rule]))
            return -1;
        bs_row_print(RULE[r->rule], &rows[r->rule]);
        printf(" %9ld %10ld %7.0fms %6.1fms\n", ev, rec, ms, r->worst_ms);
        json_t *row =
            json_pack("{s:s, s:i, s:b, s:o, s:I, s:I, s:f, s:f}", "rule", RULE[r->rule], "window",
                      window, "approximate", r->rule == SHIFT, "figures",
                      bs_row_json(&rows[r->rule]), "evictions", (json_int_t)ev, "recomputed",
                      (json_int_t)rec, "evict_ms", ms, "worst_evict_ms", r->worst_ms);
        if (recall)
            json_object_set_new(row, "recall",
                                json_pack("{s:f, s:I, s:I}", "answer_logprob",
                                          asked ? lp / asked : 0, "answered", (json_int_t)answered,
                                          "asked", (json_int_t)asked));
        json_array_append_new(rules, row);
    }
    json_array_append_new(gates,
                          json_pack("{s:i, s:b}", "window", window, "random_worse_than_oracle",
                                    gate(&rows[RANDOM], &rows[ORACLE], window)));
    if (!recall)
        return 0;
    printf("recall: the answer's mean log-probability, and the answers whose every token is the "
           "most likely one\n");
    for (int i = 0; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        if (r->window != window && r->rule != FULL)
            continue;
        double lp = 0;
        long answered = 0, asked = 0;
        for (int u = 0; u < n_convs; u++) {
            lp += r->costs[u].answer_lp, answered += r->costs[u].answered;
            asked += r->costs[u].asked;
        }
        printf("%-13s %8.3f  %ld of the %ld questions that fitted the model's positions\n",
               RULE[r->rule], asked ? lp / asked : 0, answered, asked);
    }
    return 0;
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
