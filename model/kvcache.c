#include "kv_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"

static const int ZERO_TABLE[1] = {0};

static kb_kv base_view(const kv_pool *p)
{
    return (kb_kv){.type = p->o.type,
                   .n_layer = p->L,
                   .n_head = p->H,
                   .head_dim = p->hd,
                   .max_tokens = p->o.window};
}

/* A single block of `tokens` positions at mem: the contiguous buffer and the host copy. */
kb_kv kvi_flat_view(const kv_pool *p, void *mem, int tokens)
{
    kb_kv v = base_view(p);
    v.base = mem;
    v.table = ZERO_TABLE;
    v.block_tokens = tokens > 0 ? tokens : 1;
    v.block_bytes = kvl_block_bytes(p->o.type, p->L, p->H, p->hd, v.block_tokens);
    return v;
}

size_t kvi_flat_bytes(const kv_pool *p, int tokens)
{
    return kvl_block_bytes(p->o.type, p->L, p->H, p->hd, tokens > 0 ? tokens : 1);
}

/* Copies positions [sp, sp + n) of src to [dp, dp + n) of dst, run by run within blocks: each run
 * is one strided copy over every (layer, K/V, head) row, plus one for the scales (int8, q4). Safe
 * for dst == src when dp <= sp. */
int kvi_copy_rows(kb_backend *b, const kb_kv *dst, int dp, const kb_kv *src, int sp, int n)
{
    size_t row = dt_bytes(src->type, (size_t)src->head_dim),
           sc = kvl_scale_bytes(src->type, src->head_dim),
           rows = (size_t)src->n_layer * 2 * src->n_head;
    while (n > 0) {
        int run = n;
        run = src->block_tokens - sp % src->block_tokens < run
                  ? src->block_tokens - sp % src->block_tokens
                  : run;
        run = dst->block_tokens - dp % dst->block_tokens < run
                  ? dst->block_tokens - dp % dst->block_tokens
                  : run;
        if (b->copy2d(b, kvl_row(dst, 0, 0, 0, dp), row * dst->block_tokens,
                      kvl_row(src, 0, 0, 0, sp), row * src->block_tokens, row * run, rows) ||
            (sc && b->copy2d(b, kvl_scales(dst, 0, 0, 0, dp), sc * dst->block_tokens,
                             kvl_scales(src, 0, 0, 0, sp), sc * src->block_tokens, sc * run, rows)))
            return err_wrap("copying %d cached positions", run);
        dp += run;
        sp += run;
        n -= run;
    }
    return 0;
}

void kvi_refresh_view(kv_seq *s)
{
    kv_pool *p = s->p;
    if (p->o.layout == KV_PAGED) {
        s->view = base_view(p);
        s->view.base = p->mem;
        s->view.table = s->table;
        s->view.block_tokens = p->o.block_tokens;
        s->view.block_bytes = p->block_bytes;
        /* a GPU reads the table from its own memory: send it only when it changed */
        if (s->dev_table && (s->n_sent != s->n_table ||
                             memcmp(s->sent, s->table, sizeof(int) * (size_t)s->n_table))) {
            int ok = !p->b->copy(p->b, s->dev_table, s->table, sizeof(int) * (size_t)s->n_table);
            if (ok)
                memcpy(s->sent, s->table, sizeof(int) * (size_t)s->n_table);
            s->n_sent = ok ? s->n_table : -1; /* a failed copy leaves the device's table unknown */
        }
        s->view.dev_table = s->dev_table && s->n_sent == s->n_table ? s->dev_table : NULL;
    } else {
        s->view = kvi_flat_view(p, s->buf, s->cap);
        s->view.dev_table = p->dev_zero;
    }
}

void kv_opts_default(kv_opts *o, const gpt2_config *cfg)
{
    *o = (kv_opts){.block_tokens = 16,
                   .layout = KV_PAGED,
                   .grow_factor = 2.0f,
                   .type = DT_F32,
                   .window = cfg ? cfg->n_ctx : 0};
}

kv_pool *kv_pool_create(kb_backend *b, const gpt2_config *cfg, const kv_opts *o, ev_bus *bus)
{
    if (o->block_tokens < 1 || o->block_tokens > KV_MAX_BLOCK_TOKENS)
        return err_set("--block-tokens %d is not in 1..%d", o->block_tokens, KV_MAX_BLOCK_TOKENS),
               NULL;
    if (o->window < 1 || o->window > cfg->n_ctx)
        return err_set("--ctx %d is not in 1..%d (the model's context)", o->window, cfg->n_ctx),
               NULL;
    if (o->grow_factor < 1.01f || o->grow_factor > 16)
        return err_set("--grow-factor %g is not in 1.01..16", o->grow_factor), NULL;
    if (o->type == DT_Q4 && (cfg->n_embd / cfg->n_head) % DT_Q4_BLOCK)
        return err_set("--cache-dtype q4: a head's %d values do not fill blocks of %d",
                       cfg->n_embd / cfg->n_head, DT_Q4_BLOCK),
               NULL;
    kv_pool *p = err_calloc(1, sizeof *p, "the KV pool");
    if (!p)
        return NULL;
    p->b = b;
    p->o = *o;
    p->bus = bus;
    p->L = cfg->n_layer;
    p->H = cfg->n_head;
    p->hd = cfg->n_embd / cfg->n_head;
    p->tok_bytes = 2 * (size_t)p->L * p->H * kvl_row_bytes(o->type, p->hd);
    if (!p->o.pool_bytes) { /* four full windows, at most half of the backend's free memory */
        /* in whole blocks: a window shorter than a block still needs one */
        int bt = o->layout == KV_PAGED ? o->block_tokens : 1;
        size_t want = 4 * (size_t)((o->window + bt - 1) / bt * bt) * p->tok_bytes, free_b = 0,
               total = 0;
        if (b->mem_info(b, &free_b, &total) || !free_b)
            free_b = 2 * want;
        p->o.pool_bytes = want < free_b / 2 ? want : free_b / 2;
    }
    static const int zero = 0;
    if (b->device_memory && (!(p->dev_zero = b->alloc(b, sizeof zero, "a block table")) ||
                             b->copy(b, p->dev_zero, &zero, sizeof zero))) {
        kv_pool_free(p);
        return NULL;
    }
    if (o->layout == KV_PAGED) {
        p->block_bytes = kvl_block_bytes(o->type, p->L, p->H, p->hd, o->block_tokens);
        size_t blocks = p->o.pool_bytes / p->block_bytes;
        if (blocks < 1 || blocks > INT_MAX) { /* block numbers are ints */
            size_t bb = p->block_bytes;
            if (blocks < 1)
                err_set("--cache-mem %zu bytes is smaller than one block (%zu bytes)",
                        p->o.pool_bytes, bb);
            else
                err_set("--cache-mem %zu bytes is more than the largest pool, %d blocks of %zu "
                        "bytes (%zu "
                        "bytes)",
                        p->o.pool_bytes, INT_MAX, bb, (size_t)INT_MAX * bb);
            kv_pool_free(p);
            return NULL;
        }
        p->n_blocks = (int)blocks;
        p->o.pool_bytes = (size_t)p->n_blocks * p->block_bytes;
        p->mem = b->alloc(b, p->o.pool_bytes, "the KV pool");
        p->free_list = err_malloc(sizeof(int) * p->n_blocks, "the KV pool");
        p->refs = err_calloc((size_t)p->n_blocks, sizeof(int), "the KV pool");
        p->fg_refs = err_calloc((size_t)p->n_blocks, sizeof(int), "the KV pool");
        if (!p->mem || !p->free_list || !p->refs || !p->fg_refs) {
            kv_pool_free(p);
            return NULL;
        }
        for (int i = 0; i < p->n_blocks; i++)
            p->free_list[i] = p->n_blocks - 1 - i;
        p->n_free = p->n_blocks;
    }
    return p;
}

void kv_pool_free(kv_pool *p)
{
    if (!p)
        return;
    p->bus = NULL; /* what is freed with it changes nobody's cache */
    while (p->n_seqs)
        kv_seq_free(p->seqs[p->n_seqs - 1]);
    if (p->mem)
        p->b->release(p->b, p->mem);
    if (p->dev_zero)
        p->b->release(p->b, p->dev_zero);
    free(p->free_list);
    free(p->refs);
    free(p->fg_refs);
    free(p->seqs);
    free(p);
}

const kv_opts *kv_pool_opts(const kv_pool *p) { return &p->o; }

kv_seq *kv_seq_new(kv_pool *p, int conv)
{
    kv_seq *s = err_calloc(1, sizeof *s, "a KV sequence");
    if (!s)
        return NULL;
    s->p = p;
    s->conv = conv;
    size_t table_bytes = sizeof(int) * (size_t)(p->o.window / p->o.block_tokens + 2);
    if (p->o.layout == KV_PAGED &&
        (!(s->table = err_malloc(table_bytes, "a block table")) ||
         !(s->sent = err_malloc(table_bytes, "a block table")) ||
         (p->b->device_memory &&
          !(s->dev_table = p->b->alloc(p->b, table_bytes, "a block table"))))) {
        kv_seq_free(s); /* not yet in the pool's list: frees what was made */
        return NULL;
    }
    if (err_grow(&p->seqs, &p->cap_seqs, (size_t)p->n_seqs + 1, sizeof *p->seqs,
                 "the KV pool's sequences")) {
        kv_seq_free(s);
        return NULL;
    }
    p->seqs[p->n_seqs++] = s;
    kvi_refresh_view(s);
    return s;
}

static void release_block(kv_pool *p, const kv_seq *s, int blk)
{
    p->fg_refs[blk] -= !s->background;
    if (--p->refs[blk] == 0) {
        p->free_list[p->n_free++] = blk;
        p->used -= p->block_bytes;
    }
}

/* Gives back the device memory of the positions from `len` on. */
void kvi_drop_after(kv_seq *s, int len)
{
    kv_pool *p = s->p;
    s->len = len;
    if (p->o.layout != KV_PAGED || s->offloaded)
        return;
    int keep = (len + p->o.block_tokens - 1) / p->o.block_tokens;
    while (s->n_table > keep)
        release_block(p, s, s->table[--s->n_table]);
}

void kvi_release_all(kv_seq *s)
{
    kv_pool *p = s->p;
    if (p->o.layout == KV_PAGED) {
        while (s->n_table)
            release_block(p, s, s->table[--s->n_table]);
    } else if (s->buf) {
        p->b->release(p->b, s->buf);
        p->used -= kvi_flat_bytes(p, s->cap);
        s->buf = NULL;
        s->cap = 0;
    }
    kvi_refresh_view(s);
}

/* After s wrote to, let go of or took blocks it shared: each other conversation whose shared count
 * moved hears of it, since only its own events would otherwise carry its totals */
void kvi_tell_peers(kv_pool *p, const kv_seq *s)
{
    if (!p->bus || p->o.layout != KV_PAGED || s->background)
        return;
    for (int i = 0; i < p->n_seqs; i++) {
        kv_seq *t = p->seqs[i];
        kv_seq_stats st;
        if (t == s || t->background || t->offloaded)
            continue;
        kv_seq_get_stats(t, &st);
        if (st.shared_blocks != t->said_shared)
            ev_emit_share(p->bus, t->conv, &(ev_share){.cache = kv_totals(t)});
    }
}

void kv_seq_free(kv_seq *s)
{
    if (!s)
        return;
    kv_pool *p = s->p;
    kvi_release_all(s);
    kvi_tell_peers(p, s);
    if (s->host)
        p->b->host_release(p->b, s->host);
    free(s->table);
    free(s->sent);
    if (s->dev_table)
        p->b->release(p->b, s->dev_table);
    for (int i = 0; i < p->n_seqs; i++)
        if (p->seqs[i] == s) {
            p->seqs[i] = p->seqs[--p->n_seqs];
            break;
        }
    free(s);
}

int kv_len(const kv_seq *s) { return s->len; }
int kv_is_offloaded(const kv_seq *s) { return s->offloaded; }
void kv_set_busy(kv_seq *s, int busy) { s->busy = busy; }
void kv_advance(kv_seq *s, int n) { s->len += n; }

void kv_set_draft(kv_seq *s) { s->draft = 1; }

void kv_pool_set_draft(kv_pool *p) { p->draft = 1; }

void kv_drop_all(kv_seq *s)
{
    int from = s->len;
    if (s->offloaded) { /* its rows are in host memory: they go, the pool's is not touched */
        s->p->b->host_release(s->p->b, s->host);
        s->host = NULL;
        s->host_tokens = 0;
        s->offloaded = 0;
    }
    kvi_release_all(s);
    s->len = 0;
    kvi_tell_peers(s->p, s);
    if (from && !s->background)
        ev_emit_truncate(s->p->bus, s->conv,
                         &(ev_truncate){EV_OPT(from, from), .to = 0,
                                        EV_OPT(bytes, (long long)from * (long long)s->p->tok_bytes),
                                        EV_OPT(cache, kv_totals(s))});
}

ev_bus *kv_pool_bus(const kv_pool *p) { return p->bus; }

static size_t free_bytes(const kv_pool *p)
{
    return p->o.layout == KV_PAGED ? (size_t)p->n_free * p->block_bytes : p->o.pool_bytes - p->used;
}

/* Frees `bytes`: a drafter's cache first (an optimisation: kv_drop_all, and the drafter builds it
 * again when there is room, or drafts nothing), then the least recently used idle sequences, moved
 * to host memory. */
static int make_room(kv_pool *p, const kv_seq *requester, size_t bytes)
{
    while (free_bytes(p) < bytes) {
        if (requester->background) {
            p->refused++;
            return err_set("the KV pool cannot spare %zu more bytes for work in the background",
                           bytes - free_bytes(p));
        }
        kv_seq *gives = NULL;
        for (int i = 0; i < p->n_seqs && !gives; i++) {
            kv_seq *c = p->seqs[i];
            if (c != requester && c->draft && !c->background && !c->offloaded &&
                (c->n_table || c->buf))
                gives = c;
        }
        if (gives) {
            kv_drop_all(gives);
            continue;
        }
        kv_seq *victim = NULL;
        for (int i = 0; i < p->n_seqs; i++) {
            kv_seq *c = p->seqs[i];
            if (c == requester || c->busy || c->offloaded || c->background ||
                (c->n_table == 0 && !c->buf))
                continue;
            if (!victim || c->last_used < victim->last_used)
                victim = c;
        }
        if (!victim) {
            p->refused++;
            return err_set("the KV pool (%zu bytes) is full: %zu more bytes are needed and no idle "
                           "conversation "
                           "is left to move to host memory; raise --cache-mem or shorten --ctx",
                           p->o.pool_bytes, bytes - free_bytes(p));
        }
        if (kv_offload(victim))
            return -1;
    }
    return 0;
}

int kvi_alloc_block(kv_pool *p, const kv_seq *requester)
{
    if (make_room(p, requester, p->block_bytes))
        return -1;
    int blk = p->free_list[--p->n_free];
    p->refs[blk] = 1;
    p->fg_refs[blk] = !requester->background;
    p->used += p->block_bytes;
    p->peak = p->used > p->peak ? p->used : p->peak;
    return blk;
}

/* Gives table slot i a block of its own, copying the `rows` filled positions. */
int kvi_unshare(kv_seq *s, int i, int rows, size_t *copied)
{
    kv_pool *p = s->p;
    int nb = kvi_alloc_block(p, s);
    if (nb < 0)
        return -1;
    kb_kv to = s->view; /* the new block alone, as positions 0.. */
    to.base = p->mem + (size_t)nb * p->block_bytes;
    to.table = ZERO_TABLE;
    if (kvi_copy_rows(p->b, &to, 0, &s->view, i * p->o.block_tokens, rows)) {
        release_block(p, s, nb);
        return -1;
    }
    release_block(p, s, s->table[i]);
    s->table[i] = nb;
    *copied += (size_t)rows * p->tok_bytes;
    return 0;
}

/* the capacity a contiguous sequence of capacity cap grows to when it needs `need` positions */
static int next_cap(const kv_pool *p, int cap, int need)
{
    int next = p->o.prealloc ? p->o.window
               : cap         ? (int)ceilf(cap * p->o.grow_factor)
                             : p->o.block_tokens;
    next = next < need ? need : next;
    return next > p->o.window ? p->o.window : next;
}

size_t kv_growth_bytes(const kv_seq *s, int to)
{
    const kv_pool *p = s->p;
    if (p->o.layout == KV_PAGED) /* a block at a time, and a copy of a shared last block */
        return (size_t)(to - s->len + p->o.block_tokens) * p->tok_bytes;
    /* each growth needs its new buffer free while the old one is held, past what the growths
     * before it took */
    size_t most = 0, took = 0;
    for (int cap = s->cap; cap < to;) {
        int next = next_cap(p, cap, cap + 1);
        size_t need = took + kvi_flat_bytes(p, next);
        most = need > most ? need : most;
        took += kvi_flat_bytes(p, next) - (cap ? kvi_flat_bytes(p, cap) : 0);
        cap = next;
    }
    return most;
}

int kvi_grow_contiguous(kv_seq *s, int need, size_t *added, size_t *copied)
{
    kv_pool *p = s->p;
    int cap = next_cap(p, s->cap, need);
    size_t old = s->buf ? kvi_flat_bytes(p, s->cap) : 0, bytes = kvi_flat_bytes(p, cap);
    if (make_room(p, s, bytes))
        return -1;
    char *buf = p->b->alloc(p->b, bytes, "a contiguous KV cache");
    if (!buf)
        return -1;
    kb_kv to = kvi_flat_view(p, buf, cap);
    p->peak =
        p->used + bytes > p->peak ? p->used + bytes : p->peak; /* old and new, during the copy */
    if (s->len && kvi_copy_rows(p->b, &to, 0, &s->view, 0, s->len)) {
        p->b->release(p->b, buf);
        return -1;
    }
    if (s->buf)
        p->b->release(p->b, s->buf);
    p->used += bytes - old;
    s->buf = buf;
    s->cap = cap;
    *added = bytes - old;
    *copied = (size_t)s->len * p->tok_bytes;
    return 0;
}

int kv_reserve(kv_seq *s, int n)
{
    kv_pool *p = s->p;
    int need = s->len + n;
    if (need > p->o.window)
        return err_set("%d cached + %d new tokens exceed the window of %d", s->len, n, p->o.window);
    if (s->offloaded && kv_restore(s))
        return -1;
    s->last_used = ++p->tick;
    double t0 = ev_clock();
    int from = p->o.layout == KV_PAGED ? s->n_table * p->o.block_tokens : s->cap;
    size_t added = 0, copied = 0;
    if (p->o.layout == KV_PAGED) {
        int bt = p->o.block_tokens, i = s->len / bt;
        if (s->len % bt && p->refs[s->table[i]] > 1 && kvi_unshare(s, i, s->len % bt, &copied))
            return -1;
        while (s->n_table * bt < need) {
            int blk = kvi_alloc_block(p, s);
            if (blk < 0)
                return -1;
            s->table[s->n_table++] = blk;
            added += p->block_bytes;
        }
    } else if (need > s->cap && kvi_grow_contiguous(s, need, &added, &copied)) {
        return -1;
    }
    kvi_refresh_view(s);
    if (copied) /* before its own event: at every event every figure is current */
        kvi_tell_peers(p, s);
    int to = p->o.layout == KV_PAGED ? s->n_table * p->o.block_tokens : s->cap;
    if (added && !s->background) {
        s->grows++;
        ev_emit_grow(p->bus, s->conv,
                     &(ev_grow){EV_OPT(from, from), EV_OPT(to, to), EV_OPT(bytes, (long long)added),
                                EV_OPT(copied, (long long)copied),
                                EV_OPT(ms, (ev_clock() - t0) * 1e3), EV_OPT(cache, kv_totals(s))});
    } else if (copied && !s->background) {
        ev_emit_cow(p->bus, s->conv,
                    &(ev_cow){EV_OPT(copied, (long long)copied),
                              EV_OPT(ms, (ev_clock() - t0) * 1e3), EV_OPT(cache, kv_totals(s))});
    }
    return 0;
}

const kb_kv *kv_view(kv_seq *s) { return &s->view; }
