/* Rows moved out of the pool and back: a sequence's export and import (KV snapshots, --save-cache)
 * and its offload to host memory when the pool is full, restored when it is used again. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"
#include "kv_internal.h"

size_t kv_export_bytes(const kv_seq *s) { return kvi_flat_bytes(s->p, s->len); }

size_t kv_rows_bytes(const kv_seq *s, int len) { return kvi_flat_bytes(s->p, len); }

int kv_export(kv_seq *s, void *out)
{
    if (s->offloaded && kv_restore(s))
        return -1;
    kb_kv to = kvi_flat_view(s->p, out, s->len);
    return s->len ? kvi_copy_rows(s->p->b, &to, 0, &s->view, 0, s->len) : 0;
}

/* Imported rows hold numbers: a NaN or an infinity (a forged snapshot with its checksum recomputed)
 * would reach the attention's softmax. Each f32 value and int8 scale is finite; each 16-bit value's
 * and q4 scale's exponent is not all ones. */
static int finite_rows(const kv_pool *p, const unsigned char *in, int len)
{
    size_t rows = (size_t)p->L * 2 * p->H * len, n = rows * p->hd;
    dtype t = p->o.type;
    /* what is checked: its count, where it starts, how many make a row */
    size_t count = t == DT_I8   ? rows
                   : t == DT_Q4 ? n / DT_Q4_BLOCK
                                : n,
           at = t == DT_I8   ? n
                : t == DT_Q4 ? n / 2
                             : 0,
           per_row = t == DT_Q4   ? (size_t)p->hd / DT_Q4_BLOCK
                     : t == DT_I8 ? 1
                                  : (size_t)p->hd;
    for (size_t i = 0; i < count; i++) {
        float f = 0;
        uint16_t h = 0;
        if (t == DT_F32 || t == DT_I8)
            memcpy(&f, in + at + 4 * i, 4);
        else
            memcpy(&h, in + at + 2 * i, 2);
        int all_ones = ((t == DT_F16 || t == DT_Q4) && (h & 0x7c00) == 0x7c00) ||
                       (t == DT_BF16 && (h & 0x7f80) == 0x7f80);
        if (!isfinite(f) || all_ones)
            return err_set("cached position %zu holds a NaN or an infinity", i / per_row % len);
    }
    return 0;
}

int kv_import(kv_seq *s, const void *in, int len)
{
    if (s->len)
        return err_set("importing into a sequence that is not empty");
    if (finite_rows(s->p, in, len))
        return -1;
    if (len && kv_reserve(s, len))
        return -1;
    kb_kv from = kvi_flat_view(s->p, (void *)in, len);
    if (len && kvi_copy_rows(s->p->b, &s->view, 0, &from, 0, len))
        return -1;
    s->len = len;
    return 0;
}

int kv_offload(kv_seq *s)
{
    kv_pool *p = s->p;
    if (s->offloaded)
        return 0;
    double t0 = ev_clock();
    size_t bytes = kvi_flat_bytes(p, s->len);
    char *host = p->b->host_alloc(p->b, bytes,
                                  "an offloaded KV cache"); /* pinned on a GPU: full-speed copies */
    if (!host)
        return -1;
    kb_kv to = kvi_flat_view(p, host, s->len);
    if (s->len && kvi_copy_rows(p->b, &to, 0, &s->view, 0, s->len)) { /* stays on the device */
        p->b->host_release(p->b, host);
        return -1;
    }
    kvi_release_all(s);
    s->host = host;
    s->host_tokens = s->len;
    s->offloaded = 1;
    kvi_tell_peers(p, s);
    ev_emit_offload(p->bus, s->conv,
                    &(ev_offload){EV_OPT(tokens, s->len), EV_OPT(bytes, (long long)bytes),
                                  EV_OPT(ms, (ev_clock() - t0) * 1e3),
                                  EV_OPT(cache, kv_totals(s))});
    return 0;
}

int kv_restore(kv_seq *s)
{
    kv_pool *p = s->p;
    if (!s->offloaded)
        return 0;
    double t0 = ev_clock();
    int len = s->len;
    s->offloaded = 0;
    s->len = 0;
    size_t added, copied;
    int rc = 0;
    if (p->o.layout == KV_PAGED) {
        while (!rc && s->n_table * p->o.block_tokens < len) {
            int blk = kvi_alloc_block(p, s);
            if (blk < 0)
                rc = -1;
            else
                s->table[s->n_table++] = blk;
        }
    } else if (len) {
        rc = kvi_grow_contiguous(s, len, &added, &copied);
    }
    if (!rc) {
        kvi_refresh_view(s);
        kb_kv from = kvi_flat_view(p, s->host, s->host_tokens);
        rc = len ? kvi_copy_rows(p->b, &s->view, 0, &from, 0, len) : 0;
    }
    if (rc) { /* stays offloaded: nothing is lost */
        kvi_release_all(s);
        s->offloaded = 1;
        s->len = len;
        return -1;
    }
    p->b->host_release(p->b, s->host);
    s->host = NULL;
    s->len = len;
    s->last_used = ++p->tick;
    ev_emit_restore(
        p->bus, s->conv,
        &(ev_restore){EV_OPT(tokens, len), EV_OPT(bytes, (long long)kvi_flat_bytes(p, len)),
                      EV_OPT(ms, (ev_clock() - t0) * 1e3), EV_OPT(cache, kv_totals(s))});
    return 0;
}
