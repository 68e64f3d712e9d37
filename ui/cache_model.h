/* What the cache panel shows, built only from the event stream (live or replayed): per
 * conversation, the window as cells by turn and role, the numbers of the last stats event, the
 * speed of the last turn, fidelity; for the whole pool, a size history with grow and evict marks
 * and an event log. */
#ifndef KVCHAT_UI_CACHE_MODEL_H
#define KVCHAT_UI_CACHE_MODEL_H

#include <jansson.h>

#include "../model/window.h"
#include "graph.h"

#define CM_LOG_LINES 256
/* The most cells a conversation's window can have (the largest context a model may declare):
 * numbers from a file beyond it are clamped, so a hostile replay cannot size the panel's arrays. */
#define CM_MAX_CELLS 65536

/* a span's share of where the replies read (an attention event): the mean over heads and layers,
 * and the most one head gave */
typedef struct {
    double mean, max;
} cm_read;

/* A conversation's drafter (--draft): its cache, from the events whose totals say draft (never the
 * window's cells), and what its drafts came to, from the verify events (ui/cache_draft.c). */
typedef struct {
    int cached; /* an event of its cache came (a model drafter's: lookup keeps none) */
    int tokens, capacity, shared_blocks, offloaded;
    double bytes_used, bytes_reserved, host_bytes, bytes_per_token;
    long rounds, drafted, accepted, tested, made; /* as model/speculate.h counts them */
    double draft_ms, verify_ms;
    long turn_rounds, turn_drafted, turn_accepted, turn_made; /* the last turn's */
    int rejecting; /* a verify event rejected drafts: the model's truncate event that cuts them
                      comes next, past the window's cells */
} cm_draft;

typedef struct {
    int id;
    win_turn *turns;
    cm_read *reads; /* beside turns: each turn's share at the last attention event (0: none) */
    size_t cap_reads;
    cm_read keep_read; /* ... and the kept prefix's */
    int have_read;     /* an attention event came */
    int n_turns, n_cells;
    size_t cap_turns;
    int keep, window, capacity, evict_min;
    int reply_room;    /* --evict-at turn: what a turn's start keeps free for its reply */
    win_policy policy; /* the turns an eviction takes first (its stats say; reads: turn_end's) */
    double bytes_used, bytes_reserved, host_bytes, hit_rate; /* reserved - used: fragmentation */
    double bytes_per_token; /* from the events' cache totals: used bytes follow each token */
    int grows, evictions, shared_blocks, offloaded, approximate, have_stats;
    char dtype[8], layout[16];
    /* the last turn */
    double prefill_tok_s, decode_tok_s, ttft_ms, decode_ms;
    double evict_ms; /* evictions in the last turn (in its TTFT when they made room for it) */
    double pending_evict_ms;           /* evictions that made room for a prefill still to come */
    int turn_dropped, turn_recomputed; /* the last turn's evictions: tokens dropped, re-prefilled */
    int turn_prepared;                 /* ... and whether one was prepared ahead */
    double turn_ahead_ms;  /* ... the time prepared evictions took while the user typed */
    int turn_ahead_tokens; /* ... and the tokens they recomputed then */
    double last_t;         /* its newest event's time (s), for "last used" */
    graph history; /* its cache's tokens over its whole life, with grow/evict/fork/offload marks */
    int prefill_tokens, decode_tokens, awaiting_first;
    int replying; /* a reply is under way (from its prefill to its turn_end) */
    /* an eviction is re-prefilling: its grows come before its evict event, and say the tokens the
     * cache holds meanwhile (refilled), fewer than the window's cells until the evict event */
    int refilling, refilled;
    double prefill_ms;
    /* tokens per turn, for the eviction forecast */
    double avg_turn_tokens;
    int turns_seen;
    int has_fidelity, fid_top1;
    double fid_kl, fid_rate;
    int prepared;       /* the next eviction is prepared: the tokens it recomputed ahead (0: not) */
    double prepared_ms; /* ... and the time that took */
    int prepared_tokens;    /* ... and the tokens it recomputed (0 too) */
    int evictions_prepared; /* evictions swapped in prepared (of `evictions`) */
    double stall_ms;        /* replies' time waiting for evictions, all told */
    cm_draft draft;
} cm_conv;

/* ev into c's drafter: 1 when it was the drafter's (a verify event, an event of its cache), else
 * 0 (ui/cache_draft.c) */
int cm_draft_apply(cm_draft *d, const json_t *ev);
/* a new turn: the last turn's counts start again */
void cm_draft_turn(cm_draft *d);

typedef struct {
    cm_conv *convs;
    int n_convs;
    size_t cap_convs;
    double pool_bytes, pool_used;
    double now; /* the session's time (s): the newest event's, or the clock's (cm_tick) */
    int blocks_used, blocks_total, offloaded_convs;

    char log[CM_LOG_LINES][96];
    int log_conv[CM_LOG_LINES];  /* whose line it is */
    char log_kind[CM_LOG_LINES]; /* 'e' an eviction, 'g' a run of grows, 0 the rest */
    int log_head, log_n;
    int run_from, run_to, run_n; /* the newest line's run of grows: first and last size, count */
    double run_bytes;
    /* the model event */
    char model[160], backend[64];
    double weights_bytes, workspace_bytes, params, memory_total, memory_free;
    int random_weights, n_ctx;
} cache_model;

void cm_init(cache_model *m);
void cm_free(cache_model *m);
void cm_apply(cache_model *m, const json_t *ev);
cm_conv *cm_conv_get(cache_model *m, int id); /* NULL if unknown */
/* The session's clock reads `now` (seconds, as the events' t): "used" ages while nothing happens */
void cm_tick(cache_model *m, double now);
/* The tokens conversation c's cache holds now: its window's cells, or fewer while an eviction
 * re-prefills (never more than its capacity) */
int cm_tokens(const cm_conv *c);
/* What the next eviction of conversation c would drop (drop[0..n_cells)), and the forecast: tokens
 * left before it, and at the average turn size, turns left (none inside a reply, which evicts when a
 * token does not fit). Returns the tokens it would drop: none while an eviction is under way. */
int cm_preview(const cm_conv *c, unsigned char *drop, int *tokens_left, double *turns_left);
/* The share of attention that the cells drop[0..n_cells) marks held at the last attention event
 * (a turn's share spread over its cells), 0..1 */
double cm_read_share(const cm_conv *c, const unsigned char *drop);
/* A turn's statistics as ollama --verbose gives them (prompt tokens and time, reply tokens and
 * rate, TTFT, the turn's evictions), when ev is a turn_end that did not fail: 1 and buf filled,
 * else 0. */
int cm_turn_summary(cache_model *m, const json_t *ev, char *buf, size_t n);
/* The i-th newest log line (0 = newest), NULL past the end. */
const char *cm_log_line(const cache_model *m, int i);
/* Which log lines a view shows: all, evictions only, or one conversation's. */
typedef enum { LOG_ALL, LOG_EVICTIONS, LOG_CONV } cm_log_filter;
/* The i-th newest line the filter keeps (conv: the conversation LOG_CONV keeps), NULL past the end.
 */
const char *cm_log_find(const cache_model *m, int i, cm_log_filter f, int conv);

#endif
