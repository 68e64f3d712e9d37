/* The GPT-2 forward pass over a backend: pre-norm blocks (each residual add fused with the next
 * norm, or, in a decode step on a backend with fused one-token products, both folded into the
 * products), causal attention reading the KV cache, the tied LM head for the last position only,
 * and the next token chosen on the backend, beside the logits. */

#include <stdint.h>
#include <string.h>

#include "../kernels/err.h"
#include "gpt2.h"

/* floats, rounded up so that every activation buffer starts 256-byte aligned (what cuBLASLt's
 * fastest algorithms assume) */
static size_t aligned(size_t floats) { return (floats + 63) & ~(size_t)63; }

size_t gpt2_workspace_bytes(const gpt2_config *c, int n)
{
    size_t Cn = (size_t)c->n_embd * n;
    return (2 * aligned(Cn) + aligned(3 * Cn) + aligned(Cn) + aligned(4 * Cn)) * sizeof(float);
}

static int ensure_work(gpt2_model *m, kb_backend *b, int n)
{
    if (n <= m->work_tokens && b == m->work_backend)
        return 0;
    size_t Cn = (size_t)m->cfg.n_embd * n;
    float *p = b->alloc(b, gpt2_workspace_bytes(&m->cfg, n), "activations");
    if (!p)
        return -1;
    if (m->work_backend)
        m->work_backend->release(m->work_backend, m->x);
    if (!m->logits || b != m->work_backend) {
        if (m->work_backend)
            m->work_backend->release(m->work_backend, m->logits);
        m->logit_rows = m->head_rows = 1;
        if (!(m->logits = b->alloc(b, sizeof(float) * m->cfg.vocab_size, "logits"))) {
            b->release(b, p);
            m->work_backend = NULL;
            m->work_tokens = 0;
            return -1;
        }
    }
    m->work_backend = b;
    m->x = p;
    m->h = m->x + aligned(Cn);
    m->qkv = m->h + aligned(Cn);
    m->att = m->qkv + aligned(3 * Cn);
    m->fc = m->att + aligned(Cn);
    m->work_tokens = n;
    return 0;
}

/* room for the logits of rows positions (a verify pass's) */
static int ensure_logit_rows(gpt2_model *m, kb_backend *b, int rows)
{
    if (rows <= m->logit_rows)
        return 0;
    float *p = b->alloc(b, sizeof(float) * m->cfg.vocab_size * (size_t)rows, "logits");
    if (!p)
        return -1;
    b->release(b, m->logits);
    m->logits = p;
    m->logit_rows = rows;
    return 0;
}

/* where the LM head writes: the logits' row head_at on (a judged pass's place among its rows) */
static float *head_out(const gpt2_model *m)
{
    return m->logits + (size_t)m->cfg.vocab_size * (size_t)m->head_at;
}

/* A decode step, or a pass of up to step_rows tokens (a verify pass), through the backend's fused
 * products: five launches a layer, each norm folded into the product that reads it and each
 * residual add into the product that feeds it, each token's row computed as a decode step's. */
static int run_fused(gpt2_model *m, kb_backend *b, const kb_kv *kv, int n, int past, int head)
{
    const gpt2_config *c = &m->cfg;
    float *x = m->x;
    for (int l = 0; l < c->n_layer; l++) {
        const gpt2_layer *L = &m->layers[l];
        kb_norm ln1 = {L->ln1_g, L->ln1_b, c->ln_eps}, ln2 = {L->ln2_g, L->ln2_b, c->ln_eps};
        if (b->linear(b, m->qkv, x, n, &L->attn_w, L->attn_b, &ln1, KB_LINEAR, 0) ||
            b->attention(b, m->att, m->qkv, kv, l, past, n, n == 1 ? m->probe : NULL) ||
            b->linear(b, x, m->att, n, &L->proj_w, L->proj_b, NULL, KB_LINEAR, 1) ||
            b->linear(b, m->fc, x, n, &L->fc_w, L->fc_b, &ln2, KB_GELU, 0) ||
            b->linear(b, x, m->fc, n, &L->fcproj_w, L->fcproj_b, NULL, KB_LINEAR, 1))
            return err_wrap("layer %d", l);
    }
    kb_norm lnf = {m->lnf_g, m->lnf_b, c->ln_eps};
    if (head &&
        b->linear_t(b, head_out(m), x + (size_t)(n - head) * c->n_embd, head, &m->wte, &lnf))
        return err_wrap("LM head");
    return 0;
}

/* the kernels of one pass; head: also the final norm and the logits of the last head positions */
static int run(gpt2_model *m, kb_backend *b, const kb_kv *kv, const int *ids, int n, int past,
               int pos0, int head)
{
    const gpt2_config *c = &m->cfg;
    int C = c->n_embd;
    float *x = m->x, *h = m->h;
    if (b->embed(b, x, ids, n, pos0, &m->wte, &m->wpe))
        return -1;
    if (b->linear && b->linear_t && (n == 1 || n <= b->step_rows))
        return run_fused(m, b, kv, n, past, head);
    for (int l = 0; l < c->n_layer; l++) {
        const gpt2_layer *L = &m->layers[l];
        if (m->yield && atomic_load(m->yield))
            return err_set("a background pass gave way");
        /* h holds the previous block's MLP output, still to be added to the residual stream */
        if ((l == 0 ? b->layernorm(b, h, x, L->ln1_g, L->ln1_b, n, C, c->ln_eps)
                    : b->add_layernorm(b, h, x, h, L->ln1_g, L->ln1_b, n, C, c->ln_eps)) ||
            b->matmul(b, m->qkv, h, n, &L->attn_w, L->attn_b, KB_LINEAR) ||
            b->attention(b, m->att, m->qkv, kv, l, past, n, n == 1 ? m->probe : NULL) ||
            b->matmul(b, h, m->att, n, &L->proj_w, L->proj_b, KB_LINEAR) ||
            b->add_layernorm(b, h, x, h, L->ln2_g, L->ln2_b, n, C, c->ln_eps) ||
            b->matmul(b, m->fc, h, n, &L->fc_w, L->fc_b, KB_GELU) ||
            b->matmul(b, h, m->fc, n, &L->fcproj_w, L->fcproj_b, KB_LINEAR))
            return err_wrap("layer %d", l);
    }
    if (head && (b->add_layernorm(b, h, x, h, m->lnf_g, m->lnf_b, n, C, c->ln_eps) ||
                 b->matmul_t(b, head_out(m), h + (size_t)(n - head) * C, head, &m->wte)))
        return err_wrap("LM head");
    return 0;
}

/* what a recorded step depends on besides its scalars: a change means recording again. The window
 * sets the decode attention's chunk count baked into the grid, the workspace size places the
 * activation buffers, and the weights are read where they were when it was recorded. */
typedef struct {
    const void *base, *table, *x, *logits;
    size_t block_bytes;
    uint64_t weights;             /* a hash of every weight's address */
    int block_tokens, type, ends; /* ends: 0 the last layer, 1 the logits, 2 a chosen token */
    int max_tokens, work_tokens;
} step_key;

static uint64_t mix(uint64_t h, const void *p)
{
    return (h ^ (uint64_t)(uintptr_t)p) * 0x100000001b3ull;
}

static uint64_t weight_addresses(const gpt2_model *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(mix(mix(mix(mix(h, m->wte.data), m->wte.scales), m->wpe.data), m->lnf_g), m->lnf_b);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const gpt2_layer *L = &m->layers[l];
        const void *p[] = {L->ln1_g,         L->ln1_b,         L->attn_b,      L->proj_b,
                           L->ln2_g,         L->ln2_b,         L->fc_b,        L->fcproj_b,
                           L->attn_w.data,   L->proj_w.data,   L->fc_w.data,   L->fcproj_w.data,
                           L->attn_w.scales, L->proj_w.scales, L->fc_w.scales, L->fcproj_w.scales};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            h = mix(h, p[i]);
    }
    return h;
}

/* gpt2_step with the logits of the last rows positions (0: as its arguments ask) */
static int step(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
                const kb_sample *pick, int *next, float *logits, int rows)
{
    const gpt2_config *c = &m->cfg;
    int past = kv_len(cache), pos0 = past + m->pos_offset;
    if (n < 1)
        return err_set("forward pass of no tokens");
    if (pos0 + n > c->n_ctx)
        return err_set("%d cached + %d new tokens exceed the context of %d", pos0, n, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return err_set("token id %d is outside the vocabulary (0..%d)", ids[i],
                           c->vocab_size - 1);
    if (ensure_work(m, b, n) || ensure_logit_rows(m, b, rows) || kv_reserve(cache, n))
        return -1;
    const kb_kv *kv = kv_view(cache);
    step_key key;
    memset(&key, 0, sizeof key); /* compared bytewise: no stray padding */
    key.base = kv->base;
    key.table = kv->dev_table;
    key.x = m->x;
    key.logits = head_out(m);
    key.block_bytes = kv->block_bytes;
    key.block_tokens = kv->block_tokens;
    key.type = kv->type;
    key.ends = pick ? 2 : logits || rows ? 1 : 0;
    key.max_tokens = kv->max_tokens;
    key.work_tokens = m->work_tokens;
    key.weights = weight_addresses(m);
    /* without a window the attention grid is not fixed, and a probe's spans change every step:
     * such a step is never recorded */
    kb_step st = {.ids = ids,
                  .n = n,
                  .past = past,
                  .pos0 = pos0,
                  .pick = pick,
                  .next = next,
                  .key = &key,
                  .key_bytes =
                      kv->max_tokens > 0 && !(n == 1 && m->probe) && rows <= 1 ? sizeof key : 0};
    int rc, end, head = rows > 0 ? rows : key.ends > 0;
    do {
        int replayed = 0;
        if (b->step_begin && b->step_begin(b, &st, &replayed))
            return err_wrap("starting a step");
        rc = replayed ? 0 : run(m, b, kv, ids, n, past, pos0, head);
        if (!rc && !replayed && pick)
            rc = b->sample(b, next, m->logits, c->vocab_size, pick);
        end = b->step_end ? b->step_end(b, !rc) : 0;
    } while (end ==
             1); /* the backend could not record the step: issued again, it runs unrecorded */
    if (end < 0 && !rc)
        rc = err_wrap("finishing a step");
    if (rc)
        return -1;
    kv_advance(cache, n);
    if (head)
        m->head_rows = head;
    if (rows > 1 && logits)
        return m->work_backend->copy(m->work_backend, logits, m->logits,
                                     sizeof(float) * m->cfg.vocab_size * (size_t)rows);
    return logits ? gpt2_last_logits(m, logits) : 0;
}

int gpt2_step(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
              const kb_sample *pick, int *next, float *logits)
{
    return step(m, b, cache, ids, n, pick, next, logits, 0);
}

int gpt2_verify(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n, float *logits)
{
    int most = b->step_rows > 0 ? b->step_rows : n, past = kv_len(cache);
    for (int at = 0; at < n; at += most) {
        int k = n - at < most ? n - at : most;
        if (step(m, b, cache, ids + at, k, NULL, NULL, logits + (size_t)m->cfg.vocab_size * at, k))
            return kv_truncate(cache, past), -1;
    }
    return 0;
}

int gpt2_judge(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
               const kb_sample *s, const int *drafts, const double *u_rest, kb_odds *odds)
{
    int most = b->step_rows > 0 ? b->step_rows : n, past = kv_len(cache), rc = 0;
    most = most < KB_ODDS_ROWS ? most : KB_ODDS_ROWS;
    /* every row stays for gpt2_row_logits: room for all before the first pass */
    if (ensure_work(m, b, most < n ? most : n) || ensure_logit_rows(m, b, n))
        return -1;
    for (int at = 0; at < n && !rc; at += most) {
        int k = n - at < most ? n - at : most;
        m->head_at = at;
        rc = step(m, b, cache, ids + at, k, NULL, NULL, NULL, k) ||
             b->odds(b, odds + at, head_out(m), k, m->cfg.vocab_size, s + at, drafts + at,
                     u_rest + at);
    }
    m->head_at = 0;
    if (rc)
        return kv_truncate(cache, past), -1;
    m->head_rows = n;
    return 0;
}

int gpt2_row_logits(gpt2_model *m, int row, float *out)
{
    if (!m->logits)
        return err_set("no logits yet: nothing has run through the model");
    if (row < 0 || row >= m->head_rows)
        return err_set("no logits of row %d: the last pass left %d", row, m->head_rows);
    size_t V = (size_t)m->cfg.vocab_size;
    return m->work_backend->copy(m->work_backend, out, m->logits + V * (size_t)row,
                                 sizeof(float) * V);
}

int gpt2_last_logits(gpt2_model *m, float *out)
{
    return gpt2_row_logits(m, m->head_rows - 1, out);
}

int gpt2_forward(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n, float *logits)
{
    return gpt2_step(m, b, cache, ids, n, NULL, NULL, logits);
}

int gpt2_forward_yielding(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
                          const atomic_int *stop)
{
    m->yield = stop;
    int rc = gpt2_step(m, b, cache, ids, n, NULL, NULL, NULL);
    m->yield = NULL;
    return rc && atomic_load(stop) ? 1 : rc;
}
