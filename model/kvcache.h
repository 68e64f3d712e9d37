/* The per-conversation KV cache: keys and values of every layer for the tokens seen so far, so a new
 * token costs one position instead of the whole prefix. */
#ifndef KVCHAT_KVCACHE_H
#define KVCHAT_KVCACHE_H

#include <stddef.h>

#include "../kernels/backend.h"

typedef struct kv_cache kv_cache;

/* Room for `capacity` positions of n_layer layers of width C, in backend memory. */
kv_cache *kv_create(kb_backend *b, int n_layer, int C, int capacity);
void kv_free(kv_cache *c);
int kv_len(const kv_cache *c);
int kv_capacity(const kv_cache *c);
void kv_clear(kv_cache *c);
size_t kv_bytes(const kv_cache *c);
/* Key and value rows of one layer, head-major: [n_head, capacity, C / n_head]. */
float *kv_keys(kv_cache *c, int layer);
float *kv_values(kv_cache *c, int layer);
/* Marks n more positions as filled (after the forward pass wrote them). */
void kv_advance(kv_cache *c, int n);

#endif
