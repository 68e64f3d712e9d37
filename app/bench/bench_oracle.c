#include "bench_oracle.h"

#include <math.h>
#include <stdlib.h>

#include "../../kernels/err.h"
#include "bench_stats.h"

/* nats of a reply's loss below which two trials are the same */
#define ORACLE_TIE 1e-4

/* a trial's reply loss, token by token */
typedef struct {
    const oracle_turn *o;
    int k;
    double nll;
} trial;

static void trial_logits(void *ctx, const float *logits, int V)
{
    trial *t = ctx;
    int id = t->k < t->o->n_reply ? t->o->reply[t->k] : -1;
    if (id >= 0 && id != t->o->eos)
        t->nll += bs_lse(logits, V, NULL) - logits[id];
    t->k++;
}

/* the reply's loss after the eviction these ranks make, in an engine of its own */
static int try_ranks(const oracle_turn *o, engine *from, int conv, const char *msg,
                     const float *ranks, double *nll)
{
    loaded_model *lm = o->lm;
    int n, nt;
    const int *ids = engine_window(from, conv, &n);
    const win_turn *turns = engine_turns(from, conv, &nt);
    kv_pool *was = lm->pool, *pool = kv_pool_create(lm->backend, &lm->model.cfg, o->kv, NULL);
    lm->pool = pool;
    engine *e = pool ? engine_create(lm, o->mo, o->eo) : NULL;
    trial t = {.o = o};
    char *reply = NULL;
    int rc = !e || engine_restore(e, 1, ids, n, turns, nt, o->keep, &o->mo->sp, 0, 0, 0) ||
             engine_prefill_window(e, 1, NULL, NULL) || engine_rank(e, 1, ranks, nt);
    if (!rc) {
        engine_force_reply(e, o->reply, o->n_reply, trial_logits, &t);
        rc = engine_turn(e, 1, msg, &reply);
    }
    free(reply);
    engine_free(e);
    kv_pool_free(pool);
    lm->pool = was;
    *nll = t.nll;
    return rc ? err_wrap("an oracle's trial") : 0;
}

int oracle_ranks(const oracle_turn *o, engine *e, int conv, const char *msg, int message_tokens,
                 int window, double full_nll, float *ranks)
{
    int nt, best = -1, rc = 0;
    const win_turn *turns = engine_turns(e, conv, &nt);
    if (nt < 0)
        return -1;
    int need = engine_window_len(e, conv) + message_tokens + o->n_reply - window;
    double best_d = INFINITY;
    for (int i = 0; i < nt; i++)
        ranks[i] = (float)i;
    for (int c = 0; need > 0 && c < nt && !rc; c++) {
        if (turns[c].role == ROLE_PREAMBLE || turns[c].pinned ||
            turns[c].start + turns[c].len <= o->keep)
            continue;
        double nll;
        ranks[c] = -1;
        rc = try_ranks(o, e, conv, msg, ranks, &nll);
        ranks[c] = (float)c;
        /* a trial nearer by float noise only (its logits came another way) does not displace
         * an older turn: a tie goes to the oldest, as oldest-first would pick */
        if (!rc && fabs(nll - full_nll) < best_d - ORACLE_TIE)
            best_d = fabs(nll - full_nll), best = c;
    }
    if (best >= 0)
        ranks[best] = -1;
    return rc;
}
