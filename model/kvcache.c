#include "kvcache.h"

#include <stdlib.h>

#include "../kernels/err.h"

struct kv_cache {
    kb_backend *b;
    int n_layer, C, cap, len;
    float *k, *v;
};

kv_cache *kv_create(kb_backend *b, int n_layer, int C, int capacity)
{
    kv_cache *c = err_calloc(1, sizeof *c, "the KV cache");
    if (!c)
        return NULL;
    size_t per = (size_t)n_layer * capacity * C * sizeof(float);
    *c = (kv_cache){.b = b, .n_layer = n_layer, .C = C, .cap = capacity};
    c->k = b->alloc(b, per, "KV cache keys");
    c->v = c->k ? b->alloc(b, per, "KV cache values") : NULL;
    if (!c->v) {
        kv_free(c);
        return NULL;
    }
    return c;
}

void kv_free(kv_cache *c)
{
    if (!c)
        return;
    c->b->release(c->b, c->k);
    c->b->release(c->b, c->v);
    free(c);
}

int kv_len(const kv_cache *c) { return c->len; }
int kv_capacity(const kv_cache *c) { return c->cap; }
void kv_clear(kv_cache *c) { c->len = 0; }
size_t kv_bytes(const kv_cache *c) { return 2 * (size_t)c->n_layer * c->cap * c->C * sizeof(float); }
float *kv_keys(kv_cache *c, int layer) { return c->k + (size_t)layer * c->cap * c->C; }
float *kv_values(kv_cache *c, int layer) { return c->v + (size_t)layer * c->cap * c->C; }
void kv_advance(kv_cache *c, int n) { c->len += n; }
