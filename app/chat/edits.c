/* Changing a conversation's past: rollback, retry, edit, clear, pin. */
#include <stdlib.h>

#include "../../kernels/err.h"
#include "engine_state.h"

/* c's cache from `from` positions back to `to`, and the truncate event that says so */
static int truncate_cache(engine *e, conv *c, int from, int to)
{
    if (kv_truncate(c->seq, to))
        return -1;
    if (to != from)
        ev_emit_truncate(
            e->lm->bus, c->id,
            &(ev_truncate){
                EV_OPT(from, from), .to = to,
                EV_OPT(bytes, (long long)(from - to) * (long long)kv_bytes_per_token(e->lm->pool)),
                EV_OPT(cache, kv_totals(c->seq))});
    return 0;
}

/* the conversation (and its cache) back to its first `to` tokens: a retry, an edit, a reply that
 * ran into the stop text */
int eng_rollback(engine *e, conv *c, int to)
{
    int from = c->n_ids;
    if (truncate_cache(e, c, from, to))
        return -1;
    c->n_ids = to;
    c->settled = c->settled < to ? c->settled : to;
    evict_discard(c); /* made for the window as it was */
    while (c->n_turns && c->turns[c->n_turns - 1].start >= to && c->n_turns > 1)
        c->n_turns--;
    if (c->n_turns) {
        win_turn *t = &c->turns[c->n_turns - 1];
        t->len = to - t->start < 0 ? 0 : to - t->start;
    }
    return 0;
}

int eng_last_turn(const conv *c, int role)
{
    for (int t = c->n_turns - 1; t >= 0; t--)
        if (c->turns[t].role == role)
            return t;
    return -1;
}

/* the reply a retry replaces (its turn index), or -1 with the reason there is none */
static int retry_turn(const conv *c)
{
    int t = eng_last_turn(c, ROLE_ASSISTANT);
    if (t < 0 || t != c->n_turns - 1)
        return err_set("nothing to retry: the conversation does not end with a reply");
    /* a reply is drawn from the logits of the position before it: with nothing before it (evicted
     * by the reply itself), there is nothing to draw it from again */
    if (c->turns[t].start < 1)
        return err_set("cannot retry: the reply fills the window and what it answered was evicted "
                       "(raise --ctx)");
    return t;
}

int engine_can_retry(const engine *e, int id)
{
    conv *c = eng_refuse_while_running(e) ? NULL : eng_find(e, id);
    return c && retry_turn(c) >= 0 ? 0 : -1;
}

int eng_run_retry(engine *e, int id, char **out)
{
    conv *c = eng_find(e, id);
    if (!c)
        return -1;
    int t = retry_turn(c);
    if (t < 0)
        return -1;
    int to = c->turns[t].start;
    ev_emit_retry(e->lm->bus, c->id, &(ev_retry){0});
    double t0 = ev_clock();
    int rc = eng_rollback(e, c, to);
    if (!rc) {
        c->n_turns = t;
        /* the reply is drawn again from the logits of the position before it */
        rc = truncate_cache(e, c, to, to - 1) || eng_forward(e, c, c->ids + to - 1, 1, 1) ? -1 : 0;
    }
    char *r = NULL;
    int n_tok = 0;
    if (!rc) {
        ev_emit_prefill(e->lm->bus, c->id,
                        &(ev_prefill){.ids = c->ids + to - 1,
                                      .n_ids = 1,
                                      .cached = to - 1,
                                      EV_OPT(preamble, 0),
                                      EV_OPT(ms, (ev_clock() - t0) * 1e3)});
        rc = eng_reply(e, c, &r, &n_tok);
    }
    return eng_turn_end(e, c, r, n_tok, rc, out);
}

/* the first half of an edit: the last message and its reply rolled back */
static conv *edit_rollback(engine *e, int id)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return NULL;
    int t = eng_last_turn(c, ROLE_USER);
    if (t < 0) {
        err_set("nothing to edit: the conversation has no message yet");
        return NULL;
    }
    ev_emit_edit(e->lm->bus, c->id, &(ev_edit){0});
    if (eng_rollback(e, c, c->turns[t].start))
        return NULL;
    c->n_turns = t;
    return c;
}

int engine_edit(engine *e, int id, const char *text, char **out)
{
    atomic_store(&e->cancel, 0);
    conv *c = edit_rollback(e, id);
    if (!c || eng_run_turn(e, id, text, out))
        return -1;
    eng_prep_begin(e, c);
    return 0;
}

int engine_edit_start(engine *e, int id, const char *text)
{
    return edit_rollback(e, id) ? engine_turn_start(e, id, text) : -1;
}

int engine_clear(engine *e, int id)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    ev_emit_clear(e->lm->bus, c->id, &(ev_clear){0});
    int keep_turns = c->n_turns && c->turns[0].role == ROLE_PREAMBLE ? 1 : 0;
    if (eng_rollback(e, c, keep_turns ? c->turns[0].len : 0))
        return -1;
    c->n_turns = keep_turns;
    return 0;
}

int engine_rank(engine *e, int id, const float *rank, int n)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    if (e->rule.policy != WIN_RANKED || n != c->n_turns)
        return err_set("ranks for %d turns of a conversation of %d%s", n, c->n_turns,
                       e->rule.policy != WIN_RANKED ? " under another eviction rule" : "");
    for (int t = 0; t < n; t++)
        c->turns[t].read = rank[t];
    return 0;
}

int engine_pin(engine *e, int id, int turn, int pinned)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    if (turn < 0 || turn >= c->n_turns)
        return err_set("no turn %d (the conversation has %d)", turn, c->n_turns);
    c->turns[turn].pinned = pinned;
    ev_emit_pin(e->lm->bus, c->id, &(ev_pin){.turn = turn, EV_OPT(pinned, pinned)});
    return 0;
}
