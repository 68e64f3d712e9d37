/* Where a cached key or value lives: the layout contract between the cache manager
 * (model/kvcache.c) and every backend's attention kernel.
 *
 * Positions are grouped in blocks of block_tokens. A block holds, for every layer, K then V, every
 * head, its block_tokens rows of head_dim elements: offset ((layer * 2 + kv) * n_head + head) *
 * block_tokens + row. For DT_I8 a float scale per row follows the data in the same order; for DT_Q4
 * (a row is head_dim / 32 q4_0 blocks, head_dim / 2 bytes) each row's blocks' f16 scales follow the
 * data in the same order, head_dim / 32 a row. The paged
 * cache uses many small blocks from one pool; the contiguous cache is a single block as large as
 * its capacity; an offloaded copy in host memory is one block of exactly its length. */
#ifndef KVCHAT_KVLAYOUT_H
#define KVCHAT_KVLAYOUT_H

#include <stddef.h>

#include "dtype.h"

#ifdef __CUDACC__
#define KVL_FN __host__ __device__ static inline
#else
#define KVL_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *base;           /* block 0 starts here */
    const int *table;     /* table[p / block_tokens] is the block holding position p */
    const int *dev_table; /* the same table in device memory (GPU backends; the cache manager keeps
                           * it current), else NULL */
    int block_tokens;
    size_t block_bytes; /* distance between consecutive blocks */
    dtype type;
    int n_layer, n_head, head_dim;
    int max_tokens; /* the most positions the sequence can hold (0: unknown); work sized by it
                     * does not depend on the length, so a recorded decode step serves every length
                     */
} kb_kv;

KVL_FN size_t kvl_rows_per_block(const kb_kv *v)
{
    return (size_t)v->n_layer * 2 * v->n_head * v->block_tokens;
}

/* bytes of one row's scales (DT_I8: a float; DT_Q4: an f16 a block of 32; else none) */
KVL_FN size_t kvl_scale_bytes(dtype t, int head_dim)
{
    return t == DT_I8 ? sizeof(float) : t == DT_Q4 ? (size_t)head_dim / DT_Q4_BLOCK * 2 : 0;
}

/* bytes of one row: its values and its scales */
KVL_FN size_t kvl_row_bytes(dtype t, int head_dim)
{
    return dt_bytes(t, (size_t)head_dim) + kvl_scale_bytes(t, head_dim);
}

KVL_FN size_t kvl_block_bytes(dtype t, int n_layer, int n_head, int head_dim, int block_tokens)
{
    size_t rows = (size_t)n_layer * 2 * n_head * block_tokens;
    size_t bytes = rows * kvl_row_bytes(t, head_dim);
    return (bytes + 127) & ~(size_t)127; /* every block 128-byte aligned */
}

KVL_FN size_t kvl_row_index(const kb_kv *v, int layer, int kv, int head, int pos)
{
    return ((size_t)(layer * 2 + kv) * v->n_head + head) * v->block_tokens + pos % v->block_tokens;
}

KVL_FN char *kvl_block(const kb_kv *v, int pos)
{
    return (char *)v->base + (size_t)v->table[pos / v->block_tokens] * v->block_bytes;
}

KVL_FN void *kvl_row(const kb_kv *v, int layer, int kv, int head, int pos)
{
    return kvl_block(v, pos) +
           kvl_row_index(v, layer, kv, head, pos) * dt_bytes(v->type, (size_t)v->head_dim);
}

/* a row's scales: DT_I8's float, DT_Q4's head_dim / 32 f16 values */
KVL_FN void *kvl_scales(const kb_kv *v, int layer, int kv, int head, int pos)
{
    return kvl_block(v, pos) + kvl_rows_per_block(v) * dt_bytes(v->type, (size_t)v->head_dim) +
           kvl_row_index(v, layer, kv, head, pos) * kvl_scale_bytes(v->type, v->head_dim);
}

KVL_FN float *kvl_scale(const kb_kv *v, int layer, int kv, int head, int pos)
{
    return (float *)kvl_scales(v, layer, kv, head, pos);
}

#ifdef __cplusplus
}
#endif

#endif
