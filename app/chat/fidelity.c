#include "fidelity.h"

#include <math.h>
#include <stdlib.h>

#include "../../kernels/err.h"
#include "conv.h"

int fid_init(fidelity *f, int vocab)
{
    *f = (fidelity){0};
    f->cached = err_malloc(sizeof(float) * (size_t)vocab, "the fidelity check's logits");
    f->fresh =
        f->cached ? err_malloc(sizeof(float) * (size_t)vocab, "the fidelity check's logits") : NULL;
    if (!f->fresh) {
        fid_free(f);
        return -1;
    }
    return 0;
}

void fid_free(fidelity *f)
{
    kv_pool_free(f->pool);
    free(f->cached);
    free(f->fresh);
    *f = (fidelity){0};
}

void fid_check(fidelity *f, loaded_model *lm, conv *c, int window)
{
    if (!f->pool) {
        kv_opts o;
        kv_opts_default(&o, &lm->model.cfg);
        o.window = window;
        o.layout = KV_CONTIGUOUS;
        o.prealloc = 1;
        o.pool_bytes =
            2 * (size_t)lm->model.cfg.n_layer * lm->model.cfg.n_embd * 4 * (size_t)(window + 16) +
            (1 << 20);
        if (!(f->pool = kv_pool_create(lm->backend, &lm->model.cfg, &o, NULL)))
            return;
    }
    kv_seq *s = kv_seq_new(f->pool, c->id);
    /* the cached pass's logits first: the fresh pass below writes the model's own copy */
    if (!s || gpt2_last_logits(&lm->model, f->cached) ||
        gpt2_forward(&lm->model, lm->backend, s, c->ids, c->n_ids, f->fresh)) {
        kv_seq_free(s);
        return;
    }
    kv_seq_free(s);
    int V = lm->model.cfg.vocab_size, a = 0, b = 0;
    double ma = -INFINITY, mb = -INFINITY, za = 0, zb = 0, kl = 0;
    for (int i = 0; i < V; i++) {
        if (f->fresh[i] > ma)
            ma = f->fresh[i], a = i;
        if (f->cached[i] > mb)
            mb = f->cached[i], b = i;
    }
    for (int i = 0; i < V; i++) {
        za += exp(f->fresh[i] - ma);
        zb += exp(f->cached[i] - mb);
    }
    for (int i = 0; i < V; i++) { /* KL(fresh || cached) */
        double lp = f->fresh[i] - ma - log(za), lq = f->cached[i] - mb - log(zb);
        kl += exp(lp) * (lp - lq);
    }
    c->fid_checks++;
    c->fid_agree += a == b;
    ev_emit_fidelity(lm->bus, c->id,
                     &(ev_fidelity){EV_OPT(top1, a == b), EV_OPT(kl, kl > 0 ? kl : 0.0),
                                    EV_OPT(tokens, c->n_ids),
                                    EV_OPT(agree_rate, (double)c->fid_agree / c->fid_checks),
                                    EV_OPT(approximate, c->approximate)});
}
