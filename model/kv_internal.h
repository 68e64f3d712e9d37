/* The KV cache manager's own: the pool and sequence structures and the helpers its files share
 * (kvcache.c: the pool, its blocks and the sequences' room; kv_cut.c: a sequence cut back,
 * shifted and forked; kv_figures.c: what they hold; kv_offload.c: rows moved out of the pool and back). Nothing else includes it. */
#ifndef KVCHAT_KV_INTERNAL_H
#define KVCHAT_KV_INTERNAL_H

#include "kvcache.h"

struct kv_pool {
    kb_backend *b;
    kv_opts o;
    ev_bus *bus;
    int L, H, hd;
    size_t tok_bytes;  /* one position across all layers, K and V (and int8 scales) */
    size_t used, peak; /* bytes of the pool that sequences hold, now and at most */
    char *mem;         /* paged: the pool */
    int *dev_zero;     /* GPU backends: {0} in device memory, every contiguous cache's table */
    size_t block_bytes;
    int n_blocks, n_free, *free_list, *refs;
    int *fg_refs; /* of refs, the foreground sequences': what "shared" counts (a plan made in the
                   * background shares its conversation's blocks, and is no fork of it) */
    kv_seq **seqs;
    int n_seqs;
    size_t cap_seqs;
    unsigned long tick;
    int draft;             /* a drafter's own pool (kv_pool_set_draft) */
    unsigned long refused; /* requests refused for lack of room (kv_pool_refusals) */
};

struct kv_seq {
    kv_pool *p;
    int conv, len, busy, grows;
    int background;        /* kv_fork_background's: spare memory only, no events, never offloaded */
    int *table, n_table;   /* paged: the block table */
    int *dev_table, *sent; /* its copy in device memory, and what that copy holds */
    int n_sent;
    char *buf;                  /* contiguous: the buffer ... */
    int cap;                    /* ... and its capacity in positions */
    char *host;                 /* offloaded rows: one block of host_tokens positions (a later */
    int host_tokens, offloaded; /* truncation only lowers len) */
    unsigned long last_used;
    int said_shared; /* the shared blocks its last totals carried: a peer's change is told once */
    int draft;       /* a drafter's cache: its events' totals say so */
    kb_kv view;
};

/* A single block of `tokens` positions at mem: the contiguous buffer and the host copy. */
kb_kv kvi_flat_view(const kv_pool *p, void *mem, int tokens);
size_t kvi_flat_bytes(const kv_pool *p, int tokens);
/* Copies positions [sp, sp + n) of src to [dp, dp + n) of dst, run by run within blocks. Safe for
 * dst == src when dp <= sp. */
int kvi_copy_rows(kb_backend *b, const kb_kv *dst, int dp, const kb_kv *src, int sp, int n);
/* s's view after its table or buffer changed (a GPU's copy of the table sent when it changed) */
void kvi_refresh_view(kv_seq *s);
void kvi_release_all(kv_seq *s);
/* after s wrote to, let go of or took blocks it shared: the peers whose shared count moved hear */
void kvi_tell_peers(kv_pool *p, const kv_seq *s);
/* a block for requester (room made first), or -1 */
int kvi_alloc_block(kv_pool *p, const kv_seq *requester);
int kvi_grow_contiguous(kv_seq *s, int need, size_t *added, size_t *copied);
/* gives back the blocks of the positions from len on (paged), and sets the length */
void kvi_drop_after(kv_seq *s, int len);
/* gives table slot i a block of its own, copying the `rows` filled positions */
int kvi_unshare(kv_seq *s, int i, int rows, size_t *copied);

#endif
