/* The cache model's handlers of the events that move memory: grows, copies on write, shared blocks,
 * forks, offloads and restores, and a turn's stats. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/clamp.h"
#include "../model/events.h"
#include "cache_model_impl.h"
#include "format.h"

void cm_on_grow(cache_model *m, cm_conv *c, const json_t *ev)
{
    char a[32], b[32];
    graph_mark(&c->history, 'G');
    c->capacity = clamp_int(ev_grow_to(ev), 0, INT_MAX); /* live, before the turn's stats */
    c->grows++;
    c->bytes_reserved += ev_grow_bytes(ev);
    cmi_apply_totals(m, c, ev_grow_cache(ev));
    /* a run of grows of one conversation is one line: grow x7 16->128 tok +7.7 MiB; one that
     * starts below where the last ended (blocks given back meanwhile) starts a line of its own */
    int run = m->log_n && m->log_kind[cmi_log_slot(m, 0)] == 'g' &&
              m->log_conv[cmi_log_slot(m, 0)] == c->id && ev_grow_from(ev) == m->run_to;
    m->run_to = ev_grow_to(ev);
    m->run_n = run ? m->run_n + 1 : 1;
    m->run_from = run ? m->run_from : ev_grow_from(ev);
    m->run_bytes = (run ? m->run_bytes : 0) + ev_grow_bytes(ev);
    if (m->run_n > 1)
        cmi_log(m, c->id, 'g', 1, "conv %d grow x%d %d->%d tok +%s", c->id, m->run_n, m->run_from,
                ev_grow_to(ev), fmt_bytes(a, sizeof a, m->run_bytes));
    else
        cmi_log(m, c->id, 'g', 0, "conv %d grow %d->%d tok +%s %s", c->id, ev_grow_from(ev),
                ev_grow_to(ev), fmt_bytes(a, sizeof a, ev_grow_bytes(ev)),
                fmt_ms(b, sizeof b, ev_grow_ms(ev)));
}

void cm_on_cow(cache_model *m, cm_conv *c, const json_t *ev)
{
    char a[32];
    cmi_apply_totals(m, c, ev_cow_cache(ev));
    cmi_log(m, c->id, 0, 0, "conv %d copy-on-write %s", c->id,
            fmt_bytes(a, sizeof a, ev_cow_copied(ev)));
}

/* a fork wrote or let go: quiet, only the count moves */
void cm_on_share(cache_model *m, cm_conv *c, const json_t *ev)
{
    cmi_apply_totals(m, c, ev_share_cache(ev));
}

void cm_on_fork(cache_model *m, cm_conv *c, const json_t *ev)
{
    cm_conv *p = cm_conv_get(m, ev_fork_parent(ev));
    win_turn *t = p && p != c && p->n_turns ? malloc(sizeof *t * (size_t)p->cap_turns) : NULL;
    cm_read *r = t ? malloc(sizeof *r * p->cap_reads) : NULL;
    if (!r)
        free(t);
    if (r) { /* the fork starts as a copy of its parent: window, sizes, speeds, forecast */
        memcpy(t, p->turns, sizeof *t * (size_t)p->n_turns);
        memcpy(r, p->reads, sizeof *r * (size_t)p->n_turns);
        free(c->turns);
        free(c->reads);
        int id = c->id;
        *c = *p;
        c->id = id;
        c->turns = t;
        c->reads = r;
        c->prepared = 0; /* a preparation is its parent's alone */
        c->shared_blocks = p->shared_blocks = clamp_int(ev_fork_shared_blocks(ev), 0, INT_MAX);
    }
    cmi_apply_totals(m, c, ev_fork_cache(ev));
    graph_push(&c->history, c->n_cells, 'F');
    cmi_log(m, c->id, 0, 0, "fork conv %d from %d, %d shared blocks", c->id, ev_fork_parent(ev),
            ev_fork_shared_blocks(ev));
}

void cm_on_stats(cache_model *m, cm_conv *c, const json_t *ev)
{
    c->have_stats = 1;
    c->capacity = ev_stats_capacity(ev);
    c->window = clamp_int(cmi_cells(ev_stats_window(ev)), 0, CM_MAX_CELLS);
    c->keep = clamp_int(cmi_cells(ev_stats_keep(ev)), 0, CM_MAX_CELLS);
    c->evict_min = clamp_int(cmi_cells(ev_stats_evict_min(ev)), 0, CM_MAX_CELLS);
    c->reply_room = clamp_int(cmi_cells(ev_stats_reply_room(ev)), 0, CM_MAX_CELLS);
    c->policy = ev_stats_least_read(ev) ? WIN_LEAST_READ : WIN_OLDEST;
    c->bytes_used = ev_stats_bytes_used(ev);
    c->bytes_reserved = ev_stats_bytes_reserved(ev);
    c->host_bytes = ev_stats_host_bytes(ev);
    c->hit_rate = ev_stats_hit_rate(ev);
    /* grows and evictions are the events', counted here: a lifetime's, never fewer */
    c->shared_blocks = ev_stats_shared_blocks(ev);
    c->approximate |= ev_stats_approximate(ev);
    snprintf(c->dtype, sizeof c->dtype, "%s", ev_stats_cache_dtype(ev) ?: "");
    snprintf(c->layout, sizeof c->layout, "%s", ev_stats_layout(ev) ?: "");
    m->pool_bytes = ev_stats_pool_bytes(ev);
    m->pool_used = ev_stats_pool_used(ev);
    m->blocks_used = ev_stats_blocks_used(ev);
    m->blocks_total = ev_stats_blocks_total(ev);
    m->offloaded_convs = ev_stats_offloaded_convs(ev);
    if (ev_stats_has_memory_total(ev)) {
        m->memory_total = ev_stats_memory_total(ev);
        m->memory_free = ev_stats_memory_free(ev);
    }
}

/* an idle conversation's cache moved to host memory (out), or back */
static void moved(cache_model *m, cm_conv *c, int out, const json_t *cache, long long bytes,
                  double ms)
{
    char a[32], b[32];
    c->offloaded = out;
    cmi_apply_totals(m, c, cache);
    if (out)
        graph_mark(&c->history, 'O');
    cmi_log(m, c->id, 0, 0, "%s conv %d %s %s", out ? "offload" : "restore", c->id,
            fmt_bytes(a, sizeof a, bytes), fmt_ms(b, sizeof b, ms));
}

void cm_on_offload(cache_model *m, cm_conv *c, const json_t *ev)
{
    moved(m, c, 1, ev_offload_cache(ev), ev_offload_bytes(ev), ev_offload_ms(ev));
}

void cm_on_restore(cache_model *m, cm_conv *c, const json_t *ev)
{
    moved(m, c, 0, ev_restore_cache(ev), ev_restore_bytes(ev), ev_restore_ms(ev));
}
