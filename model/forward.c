/* The GPT-2 forward pass over a backend: pre-norm blocks, causal attention reading the KV cache,
 * tied LM head computed for the last position only (sampling needs no other). */

#include "../kernels/err.h"
#include "gpt2.h"

size_t gpt2_workspace_bytes(const gpt2_config *c, int n)
{
    return (size_t)(2 + 3 + 1 + 4) * c->n_embd * n * sizeof(float);
}

static int ensure_work(gpt2_model *m, kb_backend *b, int n)
{
    if (n <= m->work_tokens && b == m->work_backend)
        return 0;
    size_t C = m->cfg.n_embd, per = gpt2_workspace_bytes(&m->cfg, 1) / sizeof(float);
    float *p = b->alloc(b, per * n * sizeof(float), "activations");
    if (!p)
        return -1;
    if (m->work_backend)
        m->work_backend->release(m->work_backend, m->x);
    if (!m->dev_logits || b != m->work_backend) {
        if (m->work_backend)
            m->work_backend->release(m->work_backend, m->dev_logits);
        m->dev_logits = b->device_memory ? b->alloc(b, sizeof(float) * m->cfg.vocab_size, "logits") : NULL;
        if (b->device_memory && !m->dev_logits)
            return -1;
    }
    m->work_backend = b;
    m->x = p;
    m->h = m->x + C * n;
    m->qkv = m->h + C * n;
    m->att = m->qkv + 3 * C * n;
    m->fc = m->att + C * n;
    m->work_tokens = n;
    return 0;
}

int gpt2_forward(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n, float *logits)
{
    const gpt2_config *c = &m->cfg;
    int C = c->n_embd, past = kv_len(cache);
    if (n < 1)
        return err_set("forward pass of no tokens");
    if (past + n > c->n_ctx)
        return err_set("%d cached + %d new tokens exceed the context of %d", past, n, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return err_set("token id %d is outside the vocabulary (0..%d)", ids[i], c->vocab_size - 1);
    if (ensure_work(m, b, n) || kv_reserve(cache, n))
        return -1;
    const kb_kv *kv = kv_view(cache);
    float *x = m->x, *h = m->h;
    if (b->embed(b, x, ids, n, past, &m->wte, &m->wpe))
        return -1;
    for (int l = 0; l < c->n_layer; l++) {
        const gpt2_layer *L = &m->layers[l];
        if (b->layernorm(b, h, x, L->ln1_g, L->ln1_b, n, C, c->ln_eps) ||
            b->matmul(b, m->qkv, h, n, &L->attn_w, L->attn_b) ||
            b->attention(b, m->att, m->qkv, kv, l, past, n) ||
            b->matmul(b, h, m->att, n, &L->proj_w, L->proj_b) || b->add(b, x, h, (size_t)n * C) ||
            b->layernorm(b, h, x, L->ln2_g, L->ln2_b, n, C, c->ln_eps) ||
            b->matmul(b, m->fc, h, n, &L->fc_w, L->fc_b) || b->gelu(b, m->fc, (size_t)n * 4 * C) ||
            b->matmul(b, h, m->fc, n, &L->fcproj_w, L->fcproj_b) || b->add(b, x, h, (size_t)n * C))
            return err_wrap("layer %d", l);
    }
    kv_advance(cache, n);
    if (!logits)
        return 0;
    const float *last = x + (size_t)(n - 1) * C;
    float *out = b->device_memory ? m->dev_logits : logits;
    if (b->layernorm(b, h, last, m->lnf_g, m->lnf_b, 1, C, c->ln_eps) || b->matmul_t(b, out, h, 1, &m->wte) ||
        (out != logits && b->copy(b, logits, out, sizeof(float) * c->vocab_size)))
        return err_wrap("LM head");
    return 0;
}
