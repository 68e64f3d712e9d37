/* The backend interface: everything the forward pass asks of a device. model/ calls only this;
 * kernels/cpu/ implements it now and kernels/cuda/ will implement the same contracts.
 * Activations are float32 row-major [tokens, features]; weights keep their storage dtype. */
#ifndef KVCHAT_BACKEND_H
#define KVCHAT_BACKEND_H

#include <stddef.h>

#include "dtype.h"
#include "kvlayout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A row-major [rows, cols] weight matrix in backend memory. */
typedef struct {
    const void *data;
    dtype type;
    int rows, cols;
} kb_mat;

typedef struct kb_backend kb_backend;
struct kb_backend {
    const char *name;     /* "cpu", ... */
    void *ctx;            /* the implementation's own state */
    int threads;

    int device_memory;    /* memory from alloc is not host-addressable (copy in and out) */

    void *(*alloc)(kb_backend *b, size_t bytes, const char *what);
    void (*release)(kb_backend *b, void *p);
    /* free and total bytes of the memory this backend allocates from (host RAM, or the GPU's) */
    int (*mem_info)(kb_backend *b, size_t *free_bytes, size_t *total_bytes);
    /* bytes from src to dst, either of them host or backend memory (overlap allowed within one) */
    int (*copy)(kb_backend *b, void *dst, const void *src, size_t bytes);
    /* y[n, w.cols] = x[n, w.rows] @ w + bias (bias may be NULL): GPT-2's Conv1D layout. */
    int (*matmul)(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias);
    /* y[n, w.rows] = x[n, w.cols] @ w^T: the LM head against the tied token embedding. */
    int (*matmul_t)(kb_backend *b, float *y, const float *x, int n, const kb_mat *w);
    /* x[i] = wte[ids[i]] + wpe[pos0 + i]. */
    int (*embed)(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte, const kb_mat *wpe);
    /* y = layernorm(x) * g + beta over rows of C; y may equal x. */
    int (*layernorm)(kb_backend *b, float *y, const float *x, const float *g, const float *beta, int n, int C, float eps);
    int (*add)(kb_backend *b, float *x, const float *y, size_t n);   /* x += y */
    int (*gelu)(kb_backend *b, float *x, size_t n);                  /* tanh form, in place */
    /* Causal self-attention of layer `layer` for n new tokens at positions past..past+n-1. qkv is
     * [n, 3C] (q, k, v per token); the new k and v are first stored in the cache (converted to its
     * dtype), then y[n, C] = softmax(q k^T / sqrt(head_dim)) v over positions 0..own, per head. */
    int (*attention)(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past, int n);
    void (*destroy)(kb_backend *b);
};

/* device: "cpu", "cuda" (an error when this build or this machine has none), or "auto" (CUDA when a
 * GPU answers, else the CPU, saying so on stderr); threads <= 0: all cores. */
kb_backend *kb_create(const char *device, int threads);

#ifdef __cplusplus
}
#endif

#endif
