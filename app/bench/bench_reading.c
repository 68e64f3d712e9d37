/* kvchat bench --attention: what the attention probe (model/reading.h) costs a decode step, the
 * figure that decides whether the chat turns it on by default (under 3%). */
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/err.h"
#include "../../model/reading.h"
#include "bench.h"

enum { STEPS = 16, TURN = 48 }; /* steps a run; tokens a turn of the chat it imitates */

/* seconds per decode step after ctx tokens, each run's STEPS timed together, with the probe (and
 * the engine's work around it: the spans, the reduction, an event every 16 tokens) or without */
static int one_run(loaded_model *lm, kv_seq *c, const int *ids, int ctx, rd_reading *rd,
                   win_turn *turns, double *out)
{
    gpt2_model *m = &lm->model;
    if (kv_truncate(c, 0) || (ctx && gpt2_forward(m, lm->backend, c, ids, ctx, NULL)))
        return -1;
    double t0 = ev_clock();
    for (int s = 0; s < STEPS; s++) {
        int n = ctx + s + 1, n_turns = (n + TURN - 1) / TURN;
        if (rd) {
            for (int t = 0; t < n_turns; t++)
                turns[t] = (win_turn){.start = t * TURN,
                                      .len = t == n_turns - 1 ? n - t * TURN : TURN,
                                      .role = ROLE_USER};
            if (rd_spans(rd, turns, n_turns, 0, n, lm->bus, 1))
                return -1;
            m->probe = &rd->probe;
        }
        int rc = gpt2_forward(m, lm->backend, c, ids + ctx + s, 1, NULL);
        m->probe = NULL;
        if (rc)
            return -1;
        if (rd) {
            rd_step(rd);
            if (rd->steps == 16)
                rd_tell(rd, lm->bus, 1);
        }
    }
    *out = (ev_clock() - t0) / STEPS;
    return 0;
}

int bench_reading(loaded_model *lm, const int *ctx, int n_ctx, int runs)
{
    const gpt2_config *cfg = &lm->model.cfg;
    int W = kv_pool_opts(lm->pool)->window, rc = 0;
    int *ids = malloc(sizeof(int) * (size_t)W);
    win_turn *turns = malloc(sizeof(win_turn) * (size_t)(W / TURN + 2));
    kv_seq *c = kv_seq_new(lm->pool, 0);
    rd_reading rd;
    rd_init(&rd, cfg->n_layer, cfg->n_head);
    if (!ids || !turns || !c)
        rc = err_set("out of memory for bench --attention");
    for (int i = 0; !rc && i < W; i++)
        ids[i] = (int)((unsigned)i * 2654435761u % (unsigned)cfg->vocab_size);
    printf("context  off tok/s  on tok/s  cost (turns of %d tokens, an event every 16)\n", TURN);
    for (int k = 0; k < n_ctx && !rc; k++) {
        if (ctx[k] + STEPS > W) {
            rc = err_set("--context %d: the window holds %d", ctx[k], W);
            break;
        }
        double off[65], on[65];
        /* run 0 warms up; the two alternate so that the machine's drift falls on both */
        for (int r = 0; r <= runs && !rc; r++)
            rc = one_run(lm, c, ids, ctx[k], NULL, turns, &off[r]) ||
                 one_run(lm, c, ids, ctx[k], &rd, turns, &on[r]);
        if (rc)
            break;
        double a = bench_median(off + 1, runs), b = bench_median(on + 1, runs);
        printf("%7d  %9.1f  %8.1f  %+5.1f%%\n", ctx[k], 1 / a, 1 / b, (b / a - 1) * 100);
    }
    rd_free(&rd);
    kv_seq_free(c);
    free(turns);
    free(ids);
    return rc;
}
