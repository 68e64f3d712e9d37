/* The drafters of speculative decoding (draft.h): prompt lookup, and a draft model (the model's own
 * weights in q8, or another checkpoint) with its cache kept between rounds. */
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/cpu.h"
#include "../kernels/err.h"
#include "draft.h"

struct drafter {
    draft_opts o;
    char name[4096];
    gpt2_model model; /* a model drafter's (the first's: its clones use root's) */
    drafter *root;    /* a clone's: whose model and pool it uses; NULL for the first */
    kb_backend *b;
    kv_pool *pool;     /* where its cache lives */
    kv_pool *own_pool; /* made for a drafter whose shape differs from the model's */
    int conv;          /* the conversation its events name */
    kv_seq *seq;
    int *held; /* the ids its cache holds, then the drafts of the round */
    size_t cap_held;
    float *logits;  /* its last logits, host memory */
    void *scratch;  /* the sampling rule's */
    uint32_t *w;    /* the rule's integer weights */
    int window;     /* the positions its cache may hold */
    char dir[4096]; /* the checkpoint its model came from */
};

static gpt2_model *model_of(drafter *d) { return d->root ? &d->root->model : &d->model; }

/* a model drafter's buffers and cache: empty, or a fork of from's (which holds the same ids) */
static int buffers(drafter *d, drafter *from)
{
    size_t V = (size_t)model_of(d)->cfg.vocab_size;
    d->logits = err_malloc(sizeof(float) * V, "the drafter's logits");
    d->scratch = err_malloc(CPU_SAMPLE_SCRATCH(V), "the drafter's sampling");
    d->w = err_malloc(sizeof(uint32_t) * V, "the drafter's sampling");
    if (!d->logits || !d->scratch || !d->w)
        return -1;
    int n = from ? kv_len(from->seq) : 0;
    if (n && err_grow(&d->held, &d->cap_held, (size_t)n, sizeof *d->held, "the drafter's context"))
        return -1;
    if (!(d->seq = from ? kv_fork(from->seq, d->conv) : kv_seq_new(d->pool, d->conv)))
        return -1;
    kv_set_draft(d->seq);
    if (n)
        memcpy(d->held, from->held, sizeof *d->held * (size_t)n);
    return 0;
}

drafter *draft_new(const draft_opts *o, const gpt2_model *m, const char *model_dir, kb_backend *b,
                   kv_pool *pool, int conv)
{
    if (o->kind == DRAFT_NONE) {
        err_set("no drafter chosen");
        return NULL;
    }
    if (o->max < 1 || o->max > DRAFT_MAX_TOKENS) {
        err_set("--draft-max: %d is outside 1..%d", o->max, DRAFT_MAX_TOKENS);
        return NULL;
    }
    drafter *d = err_calloc(1, sizeof *d, "the drafter");
    if (!d)
        return NULL;
    d->o = *o;
    d->b = b;
    d->conv = conv;
    snprintf(d->name, sizeof d->name, "%s", draft_name(o));
    d->o.dir = o->kind == DRAFT_MODEL ? d->name : NULL;
    if (o->kind == DRAFT_LOOKUP)
        return d;
    const char *dir = o->kind == DRAFT_SELF_Q8 ? model_dir : o->dir;
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    dtype wt = o->kind == DRAFT_SELF_Q8 ? DT_Q8 : m->wtype;
    if (gpt2_load(&d->model, dir, wt, NULL)) {
        err_wrap("draft model %s", dir);
        free(d);
        return NULL;
    }
    const gpt2_config *dc = &d->model.cfg;
    if (dc->vocab_size != m->cfg.vocab_size) {
        err_set("draft model %s has a vocabulary of %d tokens, the model %s one of %d: a drafter "
                "must share the model's tokenizer",
                dir, dc->vocab_size, model_dir, m->cfg.vocab_size);
        goto fail;
    }
    if (gpt2_place(&d->model, b, NULL)) {
        err_wrap("draft model %s", dir);
        goto fail;
    }
    int same_shape =
        dc->n_layer == m->cfg.n_layer && dc->n_embd == m->cfg.n_embd && dc->n_head == m->cfg.n_head;
    const kv_opts *po = kv_pool_opts(pool);
    d->window = po->window < dc->n_ctx ? po->window : dc->n_ctx;
    if (!same_shape) {
        kv_opts ko = *po;
        ko.pool_bytes = 0;
        ko.window = d->window;
        if (!(d->own_pool = kv_pool_create(b, dc, &ko, kv_pool_bus(pool))))
            goto fail;
        kv_pool_set_draft(d->own_pool);
        pool = d->own_pool;
    }
    d->pool = pool;
    if (conv >= 0 && buffers(d, NULL))
        goto fail;
    return d;
fail:
    draft_free(d);
    return NULL;
}

drafter *draft_clone(drafter *d, int conv, int with_cache)
{
    drafter *root = d->root ? d->root : d, *c = err_calloc(1, sizeof *c, "the drafter");
    if (!c)
        return NULL;
    memcpy(c->name, root->name, sizeof c->name);
    c->o = root->o;
    c->o.dir = c->o.kind == DRAFT_MODEL ? c->name : NULL;
    c->root = root;
    c->b = root->b;
    c->pool = root->pool;
    c->window = root->window;
    memcpy(c->dir, root->dir, sizeof c->dir);
    c->conv = conv;
    if (c->o.kind != DRAFT_LOOKUP && buffers(c, with_cache ? d : NULL)) {
        draft_free(c);
        return NULL;
    }
    return c;
}

void draft_free(drafter *d)
{
    if (!d)
        return;
    kv_seq_free(d->seq);
    kv_pool_free(d->own_pool);
    if (!d->root && (d->o.kind == DRAFT_SELF_Q8 || d->o.kind == DRAFT_MODEL))
        gpt2_free(&d->model);
    free(d->held);
    free(d->logits);
    free(d->scratch);
    free(d->w);
    free(d);
}

kv_seq *draft_seq(drafter *d) { return d->seq; }
const gpt2_model *draft_model(const drafter *d)
{
    return d->o.kind == DRAFT_LOOKUP ? NULL : model_of((drafter *)d);
}
const draft_opts *draft_get_opts(const drafter *d) { return &d->o; }
const char *draft_dir(const drafter *d) { return d->o.kind == DRAFT_LOOKUP ? NULL : d->dir; }

int draft_import(drafter *d, const int *ids, int n, const void *rows)
{
    if (!d->seq || kv_len(d->seq) || n > d->window)
        return err_set("the drafter's cache cannot take %d positions here", n);
    if (err_grow(&d->held, &d->cap_held, (size_t)n + 1, sizeof *d->held, "the drafter's context") ||
        kv_import(d->seq, rows, n))
        return -1;
    if (n)
        memcpy(d->held, ids, sizeof *ids * (size_t)n);
    return 0;
}

/* the tokens after the latest earlier occurrence of the context's last n-gram that has max of
 * them (in a repeating stretch the latest is one period back, with fewer), else after the
 * earliest (the most); the longest n first */
static int lookup(const int *ids, int n, int max, int *out)
{
    for (int g = DRAFT_NGRAM_MAX; g >= DRAFT_NGRAM_MIN; g--) {
        if (g >= n)
            continue;
        const int *tail = ids + n - g;
        int found = -1;
        for (int at = n - g - 1; at >= 0; at--) {
            if (memcmp(ids + at, tail, sizeof *ids * (size_t)g))
                continue;
            found = at;
            if (n - (at + g) >= max)
                break;
        }
        if (found < 0)
            continue;
        int k = 0;
        for (int from = found + g; k < max && from < n; from++)
            out[k++] = ids[from];
        return k;
    }
    return 0;
}

/* how much of ids[0..n) the cache holds, from the start */
static int held_prefix(const drafter *d, const int *ids, int n)
{
    int have = kv_len(d->seq), keep = 0;
    while (keep < have && keep < n && d->held[keep] == ids[keep])
        keep++;
    return keep;
}

/* the cache cut back to the longest prefix of ids[0..n) it holds, at most `most` positions */
static int settle_to(drafter *d, const int *ids, int n, int most)
{
    int have = kv_len(d->seq), keep = held_prefix(d, ids, n);
    keep = keep < most ? keep : most;
    /* a round's rejected drafts keep their blocks for the next round; a longer cut (an eviction's)
     * gives them back */
    return have - keep <= DRAFT_MAX_TOKENS + 1 ? kv_rewind(d->seq, keep, 1)
                                               : kv_truncate_told(d->seq, keep);
}

int draft_settle(drafter *d, const int *ids, int n) { return d->seq ? settle_to(d, ids, n, n) : 0; }

/* The drafter's choice from its logits, or -1 where it stops drafting (stop_below > 0 and its most
 * likely token's probability under it): decided from the distribution before a draw, so that
 * whether a draft exists never depends on its own value (acceptance assumes each draft is drawn
 * from q as it stands) and a dropped draft spends no draw of the stream. Greedy drafts stop by the
 * softmax at temperature 1. */
static int choose(drafter *d, const float *logits, sampler *s, const int *hist, int n_hist,
                  double *q, double stop_below)
{
    int V = model_of(d)->cfg.vocab_size;
    sampler next = *s; /* the draw is taken only for a draft that is made */
    kb_sample k = sampler_draw(&next, hist, n_hist);
    int greedy = k.temp <= 0;
    if (greedy)
        k = (kb_sample){.temp = 1,
                        .top_p = 1,
                        .repeat_penalty = k.repeat_penalty,
                        .history = hist,
                        .n_history = n_hist};
    uint64_t total;
    int best = cpu_sample_weights(logits, V, &k, d->scratch, d->w, &total);
    if ((double)d->w[best] / (double)total < stop_below)
        return -1;
    *s = next;
    if (greedy)
        return best;
    int pick = cpu_sample_walk(d->w, V, total, k.u);
    for (int i = 0; q && i < V; i++)
        q[i] = (double)d->w[i] / (double)total;
    return pick < 0 ? best : pick;
}

/* A pass of the drafter failed: for the pool's lack of room, it gives its memory back (1: this
 * round drafts nothing, and goes on as a plain step); anything else is an error (-1) */
static int gave_way(drafter *d, unsigned long refusals)
{
    if (kv_pool_refusals(d->pool) == refusals)
        return -1;
    kv_drop_all(d->seq);
    return 1;
}

/* The cache brought up to ids[0..n): cut back to what it holds of them (at most `most`), the rest
 * run, the last position's logits into logits (or none). 0, or gave_way's answer. */
static int bring_up(drafter *d, const int *ids, int n, int most, float *logits)
{
    if (settle_to(d, ids, n, most))
        return -1;
    int have = kv_len(d->seq);
    unsigned long refusals = kv_pool_refusals(d->pool);
    memcpy(d->held + have, ids + have, sizeof *ids * (size_t)(n - have));
    if (have < n && gpt2_forward(model_of(d), d->b, d->seq, ids + have, n - have, logits))
        return gave_way(d, refusals);
    return 0;
}

int draft_propose(drafter *d, const int *ids, int n, sampler *s, int max, int *out, int *n_out,
                  double *q)
{
    *n_out = 0;
    if (max > d->o.max)
        max = d->o.max;
    if (d->o.kind == DRAFT_LOOKUP) {
        *n_out = max > 0 ? lookup(ids, n, max, out) : 0;
        return 0;
    }
    if (max > d->window - n)
        max = d->window - n;
    if (max < 1)
        return 0;
    size_t need = (size_t)n + (size_t)max;
    if (err_grow(&d->held, &d->cap_held, need, sizeof *d->held, "the drafter's context"))
        return -1;
    int rc = bring_up(d, ids, n, n - 1, d->logits); /* the last position again, for its logits */
    if (rc)
        return rc < 0 ? -1 : 0;
    unsigned long refusals = kv_pool_refusals(d->pool);
    size_t V = (size_t)model_of(d)->cfg.vocab_size;
    for (int k = 0; k < max; k++) {
        int t = choose(d, d->logits, s, d->held, n + k, q ? q + V * (size_t)k : NULL,
                       k > 0 ? d->o.min_prob : 0);
        if (t < 0)
            break;
        out[k] = d->held[n + k] = t;
        *n_out = k + 1;
        if (k + 1 < max && gpt2_forward(model_of(d), d->b, d->seq, &t, 1, d->logits)) {
            *n_out = 0;
            return gave_way(d, refusals) < 0 ? -1 : 0;
        }
    }
    return 0;
}

kv_seq *draft_prepare(drafter *d, const int *ids, int n, const atomic_int *stop)
{
    if (!d->seq || n > d->window)
        return NULL;
    int keep = held_prefix(d, ids, n);
    kv_seq *s = kv_fork_background(d->seq, keep);
    if (s && keep < n && gpt2_forward_yielding(model_of(d), d->b, s, ids + keep, n - keep, stop)) {
        kv_seq_free(s);
        return NULL;
    }
    return s;
}

int draft_catch_up(drafter *d, const int *ids, int n, kv_seq *prepared)
{
    if (!d->seq || n > d->window) {
        kv_seq_free(prepared);
        return 0;
    }
    if (err_grow(&d->held, &d->cap_held, (size_t)n + DRAFT_MAX_TOKENS + 1, sizeof *d->held,
                 "the drafter's context")) {
        kv_seq_free(prepared);
        return -1;
    }
    if (prepared) { /* it holds ids[0..its length) */
        kv_seq_free(d->seq);
        d->seq = prepared;
        kv_adopt(d->seq);
        memcpy(d->held, ids, sizeof *ids * (size_t)kv_len(d->seq));
    }
    return bring_up(d, ids, n, n, NULL) < 0 ? -1 : 0;
}
