/* What the cache holds, as the stats, the events' totals and the panel count it: a sequence's
 * positions, blocks and bytes, and the pool's. */
#include <string.h>

#include "kv_internal.h"

size_t kv_bytes_per_token(const kv_pool *p) { return p->tok_bytes; }
unsigned long kv_pool_refusals(const kv_pool *p) { return p->refused; }

void kv_pool_get_stats(const kv_pool *p, kv_pool_stats *st)
{
    *st = (kv_pool_stats){.pool_bytes = p->o.pool_bytes,
                          .used_bytes = p->used,
                          .peak_bytes = p->peak,
                          .blocks_total = p->n_blocks,
                          .blocks_used = p->n_blocks - p->n_free,
                          .sequences = p->n_seqs};
    for (int i = 0; i < p->n_seqs; i++)
        st->offloaded += p->seqs[i]->offloaded;
}

void kv_seq_get_stats(const kv_seq *s, kv_seq_stats *st)
{
    const kv_pool *p = s->p;
    memset(st, 0, sizeof *st);
    st->len = s->len;
    st->used_bytes = (size_t)s->len * p->tok_bytes;
    st->grows = s->grows;
    st->offloaded = s->offloaded;
    if (s->offloaded) {
        st->host_bytes = kvi_flat_bytes(p, s->host_tokens);
    } else if (p->o.layout == KV_PAGED) {
        st->blocks = s->n_table;
        st->capacity = s->n_table * p->o.block_tokens;
        st->reserved_bytes = (size_t)s->n_table * p->block_bytes;
        for (int i = 0; i < s->n_table; i++)
            st->shared_blocks += (s->background ? p->refs : p->fg_refs)[s->table[i]] > 1;
    } else {
        st->capacity = s->cap;
        st->reserved_bytes = s->buf ? kvi_flat_bytes(p, s->cap) : 0;
    }
}

ev_cache kv_totals(kv_seq *s)
{
    kv_seq_stats st;
    kv_pool_stats ps;
    kv_seq_get_stats(s, &st);
    kv_pool_get_stats(s->p, &ps);
    s->said_shared = st.shared_blocks;
    return (ev_cache){.tokens = st.len,
                      .capacity = st.capacity,
                      .bytes_used = (long long)st.used_bytes,
                      .bytes_reserved = (long long)st.reserved_bytes,
                      .bytes_per_token = (long long)s->p->tok_bytes,
                      .shared_blocks = st.shared_blocks,
                      .host_bytes = (long long)st.host_bytes,
                      .pool_used = (long long)ps.used_bytes,
                      .blocks_used = ps.blocks_used,
                      .offloaded_convs = ps.offloaded,
                      .draft = s->draft,
                      .has_draft = s->draft,
                      .own_pool = s->p->draft,
                      .has_own_pool = s->p->draft};
}
