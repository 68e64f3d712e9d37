/* The bottom of the engine: a conversation's state and its small helpers (finding one, its tokens
 * and turns, rolling it back, the stats and notice events), and the thread that prepares its next
 * eviction between turns. May call: model/, eviction.c, records.c; nothing else in the engine. */
#include <stdlib.h>
#include <string.h>

#include "../../kernels/clamp.h"
#include "../../kernels/err.h"
#include "../safe_text.h"
#include "engine_state.h"

conv *eng_find(const engine *e, int id)
{
    for (int i = 0; i < e->n_convs; i++)
        if (e->convs[i]->id == id)
            return e->convs[i];
    err_set("no conversation %d", id);
    return NULL;
}

int eng_push_ids(conv *c, const int *ids, int n)
{
    if (err_grow(&c->ids, &c->cap_ids, (size_t)(c->n_ids + n), sizeof *c->ids,
                 "a conversation's tokens"))
        return -1;
    if (n > 0) /* a conversation whose first turn failed has no tokens, and no array */
        memcpy(c->ids + c->n_ids, ids, sizeof *ids * (size_t)n);
    c->n_ids += n;
    return 0;
}

int eng_push_turn(conv *c, int role, int start)
{
    if (err_grow(&c->turns, &c->cap_turns, (size_t)c->n_turns + 1, sizeof *c->turns,
                 "a conversation's turns"))
        return -1;
    /* numbered on from the last turn, or the last an eviction dropped (events name turns by
     * number: one gone is never named again); a rollback reuses its numbers */
    int last = c->n_turns ? c->turns[c->n_turns - 1].no : 0;
    if (last < c->gone_no)
        last = c->gone_no;
    if (last >= EV_TURN_MAX)
        return err_set("this conversation has had %d turns, the most a session records: /new "
                       "starts another",
                       EV_TURN_MAX);
    int no = last + 1;
    c->turns[c->n_turns++] = (win_turn){.start = start, .role = role, .no = no};
    return 0;
}

/* The one rule where threads meet: while a reply is being generated, its worker owns the
 * conversations, so every call that would change one is refused (sampling settings are the
 * exception: engine_set_sampling queues them for the reply's end). -1 with the error, or 0. */
int eng_refuse_while_running(const engine *e)
{
    return e->running
               ? err_set("a reply is being generated: wait for it to finish (Ctrl-C stops it)")
               : 0;
}

void eng_prep_halt(engine *e)
{
    if (e->preparing)
        atomic_store(&e->prep_stop, 1);
    eng_prep_wait(e);
}

/* conversation `id`, for a call that changes it: NULL with the error while a reply runs, or when
 * there is no such conversation */
conv *eng_find_idle(engine *e, int id)
{
    eng_prep_halt(e);
    return eng_refuse_while_running(e) ? NULL : eng_find(e, id);
}

int eng_last_turn(const conv *c, int role)
{
    for (int t = c->n_turns - 1; t >= 0; t--)
        if (c->turns[t].role == role)
            return t;
    return -1;
}

/* Changing a conversation's past: rollback, retry, edit, clear, pin. */
#include <stdlib.h>

#include "../../kernels/err.h"
#include "engine_state.h"

/* the conversation (and its cache) back to its first `to` tokens: a retry, an edit, a reply that
 * ran into the stop text */
int eng_rollback(conv *c, int to)
{
    if (kv_truncate_told(c->seq, to))
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
    return c->draft ? draft_settle(c->draft, c->ids, c->n_ids) : 0;
}

int eng_spec_unwind(engine *e, conv *c)
{
    if (!e->spec)
        return 0;
    spec_drop(e->spec);
    if (kv_len(c->seq) > c->n_ids && kv_truncate_told(c->seq, c->n_ids))
        return -1;
    return draft_settle(c->draft, c->ids, c->n_ids);
}

void eng_latin1_notice(engine *e, int conv_id, const char *what, int bytes)
{
    char said[160];
    ev_emit_notice(e->lm->bus, conv_id,
                   &(ev_notice){EV_OPT(text, latin1_said(said, sizeof said, what, bytes))});
}

/* the stats event of c, from the thread its turn runs on */
void eng_stats(engine *e, const conv *c)
{
    kv_seq_stats s;
    kv_pool_stats p;
    kv_seq_get_stats(c->seq, &s);
    kv_pool_get_stats(e->lm->pool, &p);
    const kv_opts *ko = kv_pool_opts(e->lm->pool);
    /* the panel's forecast: the next eviction comes that much sooner (an -n past the window
     * cannot be made room for: a reply that long slides the window inside it) */
    int reply_room = clamp_int(win_reply_room(e->rule.when, e->mo.n_predict), 0, e->rule.window);
    size_t mem_free = 0, mem_total = 0;
    int mem = !e->lm->backend->mem_info(e->lm->backend, &mem_free, &mem_total);
    ev_emit_stats(
        e->lm->bus, c->id,
        &(ev_stats){EV_OPT(tokens, s.len),
                    EV_OPT(capacity, s.capacity),
                    EV_OPT(window, e->rule.window),
                    EV_OPT(bytes_used, (long long)s.used_bytes),
                    EV_OPT(bytes_reserved, (long long)s.reserved_bytes),
                    EV_OPT(pool_bytes, (long long)p.pool_bytes),
                    EV_OPT(pool_used, (long long)p.used_bytes),
                    EV_OPT(fragmentation, s.reserved_bytes > s.used_bytes
                                              ? (long long)(s.reserved_bytes - s.used_bytes)
                                              : 0),
                    EV_OPT(hit_rate, c->needed ? (double)c->served / (double)c->needed : 0.0),
                    EV_OPT(grows, s.grows),
                    EV_OPT(evictions, c->evictions),
                    EV_OPT(blocks_used, p.blocks_used),
                    EV_OPT(blocks_total, p.blocks_total),
                    EV_OPT(shared_blocks, s.shared_blocks),
                    EV_OPT(offloaded_convs, p.offloaded),
                    EV_OPT(keep, c->keep),
                    EV_OPT(evict_min, e->rule.target),
                    .reply_room = reply_room,
                    .has_reply_room = reply_room != 0,
                    .least_read = 1,
                    .has_least_read = e->rule.policy == WIN_LEAST_READ,
                    EV_OPT(cache_dtype, dt_name(ko->type)),
                    EV_OPT(layout, ko->layout == KV_PAGED ? "paged" : "contiguous"),
                    EV_OPT(host_bytes, (long long)s.host_bytes),
                    .approximate = 1,
                    .has_approximate = c->approximate,
                    .memory_free = (long long)mem_free,
                    .has_memory_free = mem,
                    .memory_total = (long long)mem_total,
                    .has_memory_total = mem});
}

/* The engine's two threads: the worker a started turn runs on, and the one that prepares the next
 * eviction between turns; and the calls that start, wait for and cancel them (a /set waits here
 * for the reply's end). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "records.h"
#include "engine_state.h"

/* Between turns an eviction may be being prepared in the background (evict_prepare): it uses the
 * model, the pool and its conversation's cache, so every call that uses them first makes it give
 * way (within one layer's work) and waits for it. */
void eng_prep_wait(engine *e)
{
    if (e->preparing) {
        pthread_join(e->prep_thread, NULL);
        e->preparing = 0;
    }
}

static void *prep_main(void *arg)
{
    engine *e = arg;
    evict_prepare(e->prep_conv, e->lm, &e->rule, e->mo.n_predict, &e->prep_stop);
    return NULL;
}

/* after a turn of c: its next eviction prepared in the background, when the next turn may need one
 */
void eng_prep_begin(engine *e, conv *c)
{
    if (!e->o.prepare || e->preparing || !c)
        return;
    atomic_store(&e->prep_stop, 0);
    e->prep_conv = c;
    e->preparing = pthread_create(&e->prep_thread, NULL, prep_main, e) == 0;
}
