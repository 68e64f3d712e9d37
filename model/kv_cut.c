/* A sequence cut back (truncate, rewind), its rows shifted down, and forked: sharing its blocks
 * (paged) or copied (contiguous), for a conversation or for work done ahead in the background. */
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"
#include "kv_internal.h"

/* keep_blocks: a rewind's, whose next pass writes the same positions again (rejected drafts) */
static int cut(kv_seq *s, int len, int keep_blocks)
{
    if (len < 0 || len > s->len)
        return err_set("cannot truncate %d cached tokens to %d", s->len, len);
    if (keep_blocks)
        s->len = len;
    else
        kvi_drop_after(s, len);
    kvi_refresh_view(s);
    kvi_tell_peers(s->p, s);
    return 0;
}

int kv_truncate(kv_seq *s, int len) { return cut(s, len, 0); }

static int cut_told(kv_seq *s, int len, int keep_blocks)
{
    int from = s->len;
    if (cut(s, len, keep_blocks))
        return -1;
    if (len < from && !s->background)
        ev_emit_truncate(
            s->p->bus, s->conv,
            &(ev_truncate){EV_OPT(from, from), .to = len,
                           EV_OPT(bytes, (long long)(from - len) * (long long)s->p->tok_bytes),
                           EV_OPT(cache, kv_totals(s))});
    return 0;
}

int kv_truncate_told(kv_seq *s, int len) { return cut_told(s, len, 0); }

int kv_rewind(kv_seq *s, int len, int told) { return told ? cut_told(s, len, 1) : cut(s, len, 1); }

int kv_shift(kv_seq *s, int dst, int src, int n)
{
    kv_pool *p = s->p;
    if (dst < 0 || dst > src || n < 0 || src + n > s->len)
        return err_set("cannot shift positions %d..%d to %d", src, src + n, dst);
    if (s->offloaded && kv_restore(s))
        return -1;
    size_t copied = 0;
    if (p->o.layout == KV_PAGED) {
        int bt = p->o.block_tokens;
        for (int i = dst / bt; i * bt < dst + n; i++)
            if (p->refs[s->table[i]] > 1 && kvi_unshare(s, i, bt, &copied))
                return -1;
        kvi_refresh_view(s);
        kvi_tell_peers(p, s);
    }
    return kvi_copy_rows(p->b, &s->view, dst, &s->view, src, n);
}

/* a new sequence with s's first len positions; background: kv_fork_background's kind */
static kv_seq *fork_at(kv_seq *s, int conv, int len, int background)
{
    kv_pool *p = s->p;
    if (len < 0 || len > s->len) {
        err_set("cannot fork %d of %d cached positions", len, s->len);
        return NULL;
    }
    if (s->offloaded && kv_restore(s))
        return NULL;
    kv_seq *c = kv_seq_new(p, conv);
    if (!c)
        return NULL;
    c->background = background;
    c->draft = s->draft;
    double t0 = ev_clock();
    size_t copied = 0;
    int shared = 0;
    if (p->o.layout == KV_PAGED) {
        for (int i = 0; i < s->n_table; i++) {
            c->table[i] = s->table[i];
            p->refs[s->table[i]]++;
            p->fg_refs[s->table[i]] += !background;
        }
        c->n_table = s->n_table;
        c->len = len;
        kvi_drop_after(c, len);
        shared = c->n_table;
        kvi_refresh_view(c);
    } else {
        int busy = s->busy, rc;
        s->busy = 1; /* making room for the copy must not move the parent out */
        rc = len ? kv_reserve(c, len) : 0;
        s->busy = busy;
        if (rc) {
            kv_seq_free(c);
            return NULL;
        }
        if (kvi_copy_rows(p->b, &c->view, 0, &s->view, 0, len)) {
            kv_seq_free(c);
            return NULL;
        }
        c->len = len;
        copied = (size_t)len * p->tok_bytes;
    }
    c->last_used = ++p->tick;
    if (!background)
        ev_emit_fork(p->bus, conv,
                     &(ev_fork){EV_OPT(parent, s->conv), EV_OPT(tokens, len),
                                EV_OPT(shared_blocks, shared), EV_OPT(copied, (long long)copied),
                                EV_OPT(ms, (ev_clock() - t0) * 1e3), EV_OPT(cache, kv_totals(c))});
    if (!background) { /* the parent shares what the fork does, as a fork event's reader takes it */
        s->said_shared = shared;
        kvi_tell_peers(p, c);
    }
    return c;
}

kv_seq *kv_fork(kv_seq *s, int conv) { return fork_at(s, conv, s->len, 0); }

kv_seq *kv_fork_background(kv_seq *s, int len) { return fork_at(s, s->conv, len, 1); }

void kv_adopt(kv_seq *s)
{
    for (int i = 0; i < s->n_table; i++)
        s->p->fg_refs[s->table[i]]++;
    s->background = 0;
    kvi_tell_peers(s->p, s);
}
