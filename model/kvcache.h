/* The KV cache manager. One pool of cache memory per backend; each conversation owns a sequence
 * (kv_seq) whose keys and values live either in fixed blocks of the pool reached through a block
 * table (paged, the default: forks share blocks and copy on write) or in one buffer that grows by
 * a factor with a copy (contiguous). When the pool is full, the least recently used inactive
 * sequence moves to host memory and comes back when it is used again. What it does is an event on
 * the bus (grow, cow, fork, offload, restore, share); truncation is the caller's to report, since
 * only the caller knows whether it is a rollback or a step of an eviction (kv_truncate_told
 * reports it for a caller whose cut is its own news). */
#ifndef KVCHAT_KVCACHE_H
#define KVCHAT_KVCACHE_H

#include <stddef.h>

#include "../kernels/backend.h"
#include "config.h"
#include "events.h"

/* the most tokens a paged cache block holds */
#define KV_MAX_BLOCK_TOKENS 4096

typedef enum { KV_PAGED, KV_CONTIGUOUS } kv_layout;

typedef struct {
    size_t pool_bytes; /* the whole pool; 0: a few full windows, bounded by free memory */
    int block_tokens;  /* paged block size in positions (default 16); contiguous start size */
    kv_layout layout;
    float grow_factor; /* contiguous growth (default 2) */
    int prealloc;      /* contiguous: the whole window at once */
    dtype type;        /* f32, f16, bf16, int8 */
    int window;        /* positions a sequence may hold (the model's context, or --ctx) */
} kv_opts;

typedef struct {
    int len, capacity; /* positions used and allocated */
    size_t used_bytes, reserved_bytes;
    int blocks,
        shared_blocks; /* paged: blocks in the table, of which shared with another sequence */
    int grows, offloaded;
    size_t host_bytes; /* held in host memory while offloaded */
} kv_seq_stats;

typedef struct {
    size_t pool_bytes, used_bytes, peak_bytes; /* peak counts a contiguous growth's two buffers */
    int blocks_total, blocks_used;             /* paged only */
    int sequences, offloaded;
} kv_pool_stats;

typedef struct kv_pool kv_pool;
typedef struct kv_seq kv_seq;

/* The defaults; the window is cfg's context (cfg NULL: 0, to be set once a model is known). */
void kv_opts_default(kv_opts *o, const gpt2_config *cfg);
kv_pool *kv_pool_create(kb_backend *b, const gpt2_config *cfg, const kv_opts *o, ev_bus *bus);
void kv_pool_free(kv_pool *p);
void kv_pool_get_stats(const kv_pool *p, kv_pool_stats *st);
size_t kv_bytes_per_token(const kv_pool *p);
const kv_opts *kv_pool_opts(const kv_pool *p);

/* A new empty sequence; conv is the id its events carry. */
kv_seq *kv_seq_new(kv_pool *p, int conv);
/* Marks s as a drafter's cache (speculative decoding): the totals of its events (and its forks')
 * carry draft, so that readers tell it from its conversation's own cache. */
void kv_set_draft(kv_seq *s);
/* Marks p as a drafter's pool of its own (a draft model of another shape): its sequences' totals
 * carry own_pool, so that readers keep the conversations' pool figures apart from its. */
void kv_pool_set_draft(kv_pool *p);
/* How many requests p refused for lack of room so far: a drafter tells from it that its pass
 * failed for memory, and gives way (kv_drop_all) rather than fail the reply. */
unsigned long kv_pool_refusals(const kv_pool *p);
/* Empties s and gives all its memory back (its pool's, or host memory where it was offloaded),
 * with a truncate event: a drafter's cache giving way to a conversation's. */
void kv_drop_all(kv_seq *s);
/* the bus the pool's events go to (NULL: none) */
ev_bus *kv_pool_bus(const kv_pool *p);
void kv_seq_free(kv_seq *s);
int kv_len(const kv_seq *s);
void kv_seq_get_stats(const kv_seq *s, kv_seq_stats *st);
/* The sequence's totals and its pool's, as the "cache" block of an event that changed them
 * (event_schema.h's EV_CACHE_FIELDS). It notes the shared blocks it carried: when another
 * sequence's write or release changes them, a share event carries this one's totals. */
ev_cache kv_totals(kv_seq *s);

/* Makes room for n more positions that this sequence alone owns (allocating, growing, copying
 * shared blocks, restoring it if offloaded, offloading others if the pool is full). */
int kv_reserve(kv_seq *s, int n);
/* The free pool bytes this sequence needs to grow to `to` positions one at a time (as a reply
 * does), however its layout grows: a paged one a block at a time, a contiguous one by copying into
 * a bigger buffer while the old one is held (nothing once the whole window is reserved). */
size_t kv_growth_bytes(const kv_seq *s, int to);
/* Where attention finds this sequence's rows; valid until the next call that changes it. */
const kb_kv *kv_view(kv_seq *s);
/* n more positions (written by the forward pass after kv_reserve) are now filled. */
void kv_advance(kv_seq *s, int n);
/* Keeps the first len positions (rolling back a reply costs nothing to recompute). */
int kv_truncate(kv_seq *s, int len);
/* The same, and the truncate event that says so when it cut anything: for a caller whose cut is
 * its own news (a rollback, rejected drafts), not a step of something it reports otherwise. */
int kv_truncate_told(kv_seq *s, int len);
/* kv_truncate (told: kv_truncate_told) keeping the blocks past len (paged) for the positions the
 * next pass writes again: a speculative round's rejected drafts, whose next round reaches as far,
 * cost no block released and taken back (nor, on a GPU, a block table sent again). kv_truncate
 * releases them. */
int kv_rewind(kv_seq *s, int len, int told);
/* Moves positions [src, src + n) down to dst (dst <= src), leaving the length alone: the
 * approximate "shift" eviction, whose moved keys keep the positions they were computed at. */
int kv_shift(kv_seq *s, int dst, int src, int n);
/* A new sequence with the same positions, sharing blocks (paged) or copied (contiguous). */
kv_seq *kv_fork(kv_seq *s, int conv);
/* The same of the first len positions, for work done ahead in the background (a prepared eviction):
 * it takes only memory the pool can spare, now and in every later kv_reserve (failing rather than
 * moving another sequence out), is never moved out itself, and emits no events until kv_adopt makes
 * it an ordinary sequence (of s's conversation). */
kv_seq *kv_fork_background(kv_seq *s, int len);
void kv_adopt(kv_seq *s);
/* The first len positions as one flat block (the layout of an offloaded copy): its size, a copy
 * out, and a copy into an empty sequence. For KV snapshots on disk. */
size_t kv_export_bytes(const kv_seq *s);
size_t kv_rows_bytes(const kv_seq *s, int len); /* the export size of len positions */
int kv_export(kv_seq *s, void *out);
int kv_import(kv_seq *s, const void *in, int len);
int kv_offload(kv_seq *s);
int kv_restore(kv_seq *s);
int kv_is_offloaded(const kv_seq *s);
/* The sequence in use is never chosen for offloading. */
void kv_set_busy(kv_seq *s, int busy);

#endif
