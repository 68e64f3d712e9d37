/* The backend interface: everything the forward pass asks of a device. model/ calls only this;
 * kernels/cpu/ (the reference) and kernels/cuda/ implement the same contracts.
 * Activations are float32 row-major [tokens, features]; weights keep their storage dtype. */
#ifndef KVCHAT_BACKEND_H
#define KVCHAT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "kvlayout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A [rows, cols] weight matrix in backend memory: row-major, except DT_Q8, which is stored along
 * the reduction in blocks of DT_Q8_BLOCK, an f16 scale each: matmul's W by output column (data[j *
 * rows + k], scales[j * rows / 32 + k / 32]; rows a multiple of 32), matmul_t's and the embeddings'
 * by row (data[r * cols + c], scales[r * cols / 32 + c / 32]; cols a multiple of 32). */
/* A matmul W the CPU backend packed (kb_backend.pack; f32, f16, bf16) has column_blocks set: its
 * columns in blocks of KB_COLUMN_BLOCK, each block's rows one after the other (element (k, j) at
 * data[(j - j % B) * rows + k * B + j % B], B = KB_COLUMN_BLOCK; cols a multiple of B), so that a
 * one-token product reads one ascending stream and keeps its sums in registers. A packed DT_Q4 W
 * (AVX-512 VNNI builds) has its columns in groups of 16, each group's blocks in turn: block b of
 * group g is 4 runs of 64 bytes, run r holding bytes 4r..4r+3 of the 16 columns' block b in column
 * order, and its 16 scales side by side (scales[(g * rows / 32 + b) * 16 + j % 16]). A packed
 * DT_Q6 matrix (the token embedding, matmul_t's [V, K]; AVX-512 VBMI builds) has its rows in
 * groups of 16 the same way: block b of group g is 8 runs of 48 bytes, run r holding bytes
 * 3r..3r + 2 (values 4r..4r + 3) of the 16 rows' block b in row order, then the scales as q4's;
 * the last group's missing rows are zeros, and 64 bytes follow the scales. */
enum { KB_COLUMN_BLOCK = 64 };
typedef struct {
    const void *data;
    dtype type;
    int rows, cols;
    const uint16_t *scales; /* the block types' (DT_Q8, DT_Q4, DT_Q6) only */
    int column_blocks;      /* the layout above (kernels/cpu only) */
} kb_mat;

/* One token's choice (the rule is kernels/cpu/sample.c): repetition penalty over the distinct ids
 * of history, then greedy when temp <= 0, else softmax at temp with top-k and top-p, and a draw
 * with u. */
typedef struct {
    float temp, top_p, repeat_penalty;
    int top_k;
    double u;           /* this token's uniform draw in [0, 1) */
    const int *history; /* ids already in the context, host memory */
    int n_history;
} kb_sample;

/* A verify row's figures for speculative decoding's acceptance, by the rule above: pick is the
 * row's choice (greedy: the penalised argmax; else the draw at its u); weight is the draft id's
 * kept integer probability and total the kept sum (the draft's odds are weight / total; both 0
 * under greedy); rest is the draw at u_rest from the kept ids other than the draft (the residual
 * of a draft that was certain, -1 when no other id is kept). */
typedef struct {
    int pick, rest;
    uint32_t weight;
    uint64_t total;
} kb_odds;
enum { KB_ODDS_ROWS = 16 }; /* rows one odds call takes */

/* The scalars of one forward pass. A backend that records work (CUDA graphs) keeps them in its own
 * memory so that a recorded decode step replays with each new token's values. */
typedef struct {
    const int *ids; /* the new tokens, host memory */
    int n, past;
    int pos0; /* the first new token's position (its wpe row): past, unless earlier positions left
               * the cache without being recomputed (gpt2_model.pos_offset) */
    const kb_sample *pick; /* the sample call this step ends with, or NULL */
    int *next;             /* where that call puts the chosen id */
    const void *key;       /* everything else the recorded work depends on (buffers, cache view) */
    size_t key_bytes;      /* 0: the step must not be recorded */
} kb_step;

/* what a matrix product applies to its output */
typedef enum { KB_LINEAR, KB_GELU } kb_act;

/* a layernorm folded into a product's input: each row of x becomes (x - mean) / sqrt(var + eps) * g
 * + b */
typedef struct {
    const float *g, *b;
    float eps;
} kb_norm;

/* A backend's kernel sets: fast, or basic (the previous release's, kept as a fallback for a device
 * on which the fast ones have not been checked: the self-test tries fast, then basic, then the
 * CPU). */
typedef enum { KB_KERNELS_FAST, KB_KERNELS_BASIC } kb_kernels;

/* Where a decode step's attention put its weight: the window cut into spans (its turns), span s the
 * positions [start[s], start[s + 1]), start[0] = 0, start[n_spans] >= the step's positions (those
 * past it count for nothing). mass[(layer * n_head + head) * n_spans + s] gets the softmax weight
 * that head of that layer gave span s, so a head's n_spans values sum to 1. Host memory, both; a
 * device backend has mass in place when the step ends. */
typedef struct {
    const int *start;
    int n_spans;
    float *mass;
} kb_probe;

typedef struct kb_backend kb_backend;
struct kb_backend {
    const char *name; /* "cpu", ... */
    void *ctx;        /* the implementation's own state */
    int threads;

    int device_memory; /* memory from alloc is not host-addressable (copy in and out) */
    /* a pass of at most this many positions computes each one bit for bit as a one-position pass
     * (a decode step) does, which a longer pass need not (its products sum in another order);
     * gpt2_verify splits its passes so, and a backend with fused products (linear) runs such
     * passes through them. 0: no such promise at any length */
    int step_rows;

    void *(*alloc)(kb_backend *b, size_t bytes, const char *what);
    void (*release)(kb_backend *b, void *p);
    /* free and total bytes of the memory this backend allocates from (host RAM, or the GPU's) */
    int (*mem_info)(kb_backend *b, size_t *free_bytes, size_t *total_bytes);
    /* bytes from src to dst, either of them host or backend memory (overlap allowed within one) */
    int (*copy)(kb_backend *b, void *dst, const void *src, size_t bytes);
    /* height rows of width bytes, their starts dst_pitch and src_pitch apart; as copy, and a dst
     * below an overlapping src with equal pitches is allowed */
    int (*copy2d)(kb_backend *b, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                  size_t width, size_t height);
    /* Optional (NULL: none): *out = w in the backend's own layout for matmul, in memory from
     * alloc (the caller releases out->data), or out->data NULL where w serves as it is. Called once
     * per product weight at load. */
    int (*pack)(kb_backend *b, kb_mat *out, const kb_mat *w);
    /* y[n, w.cols] = act(x[n, w.rows] @ w + bias) (bias may be NULL): GPT-2's Conv1D layout;
     * KB_GELU is the tanh form GPT-2 uses. */
    int (*matmul)(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                  const float *bias, kb_act act);
    /* y[n, w.rows] = x[n, w.cols] @ w^T: the LM head against the tied token embedding. */
    int (*matmul_t)(kb_backend *b, float *y, const float *x, int n, const kb_mat *w);
    /* x[i] = wte[ids[i]] + wpe[pos0 + i]. */
    int (*embed)(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte,
                 const kb_mat *wpe);
    /* y = layernorm(x) * g + beta over rows of C; y may equal x. */
    int (*layernorm)(kb_backend *b, float *y, const float *x, const float *g, const float *beta,
                     int n, int C, float eps);
    /* Causal self-attention of layer `layer` for n new tokens at positions past..past+n-1. qkv is
     * [n, 3C] (q, k, v per token); the new k and v are first stored in the cache (converted to its
     * dtype), then y[n, C] = softmax(q k^T / sqrt(head_dim)) v over positions 0..own, per head.
     * probe (NULL: none; n == 1 only): this layer's rows of the weight each head gave each span. */
    int (*attention)(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer,
                     int past, int n, const kb_probe *probe);
    /* x += r, then y = layernorm(x) * g + beta: the residual add fused with the next block's norm
     */
    int (*add_layernorm)(kb_backend *b, float *y, float *x, const float *r, const float *g,
                         const float *beta, int n, int C, float eps);
    /* The products of a decode step with what surrounds them fused in (NULL where the backend
     * has no such kernels: the forward pass then calls layernorm, matmul and add_layernorm
     * instead), for n tokens up to step_rows, each token's row bit for bit what the call with it
     * alone gives. linear: y[n, w.cols] = act(norm(x)[n, w.rows] @ w + bias), or with residual
     * (act KB_LINEAR) y += norm(x) @ w + bias; linear_t: y[n, w.rows] = norm(x)[n, w.cols] @ w^T,
     * the LM head. norm (each row's own) and bias may be NULL; y and x do not overlap. */
    int (*linear)(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                  const float *bias, const kb_norm *norm, kb_act act, int residual);
    int (*linear_t)(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                    const kb_norm *norm);
    /* *out = the id chosen from logits[vocab] (backend memory, left unchanged). Inside a step, *out
     * is valid once step_end returns. */
    int (*sample)(kb_backend *b, int *out, const float *logits, int vocab, const kb_sample *s);
    /* out[i] for rows i < n (<= KB_ODDS_ROWS) of logits[n, vocab] (backend memory, unchanged),
     * row i chosen under s[i] with the draft id ids[i] (-1: none) and u_rest[i]. The rows share
     * their settings and history: row i's is s[0].history[0 .. s[0].n_history + i). Outside a
     * step; only out leaves the device. */
    int (*odds)(kb_backend *b, kb_odds *out, const float *logits, int n, int vocab,
                const kb_sample *s, const int *ids, const double *u_rest);
    /* Bracket one forward pass (optional, NULL on the CPU). step_begin sets *replayed when the
     * backend ran a recording of the same step itself: the caller then issues no kernels and calls
     * step_end. step_end (ok = 0: the caller failed) returns 0, -1 on error, or 1 when the backend
     * could not record the step and ran none of it: the caller issues the step again, and it runs
     * unrecorded. */
    int (*step_begin)(kb_backend *b, const kb_step *s, int *replayed);
    int (*step_end)(kb_backend *b, int ok);
    /* seconds the last step took on the device by its own clock (CUDA events), or NULL */
    double (*step_seconds)(kb_backend *b);
    /* kernels and copies in the last recorded decode step (0: none recorded yet), or NULL */
    int (*step_nodes)(kb_backend *b);
    /* which kernel set runs from now on; NULL where the backend has one */
    int (*use_kernels)(kb_backend *b, kb_kernels k);
    /* the memory's peak bandwidth in bytes/s by its clock and bus width (the floor a decode step is
     * measured against), 0 where unknown */
    double peak_bandwidth;
    /* host memory the backend copies fastest (pinned on a GPU), for offloaded caches */
    void *(*host_alloc)(kb_backend *b, size_t bytes, const char *what);
    void (*host_release)(kb_backend *b, void *p);
    /* the device and its driver in words ("NVIDIA H200, driver 13.0, compute 9.0"), which key the
     * self-test's verdicts; NULL on the CPU, the reference itself */
    int (*describe)(kb_backend *b, char *buf, size_t n);
    void (*destroy)(kb_backend *b);
};

/* device: "cpu", "cuda" (an error when this build or this machine has none), or "auto" (CUDA when a
 * GPU answers, else the CPU: kb_fallback_reason then says why); threads <= 0: every core this
 * process may run on. */
kb_backend *kb_create(const char *device, int threads);
/* Why the last "auto" fell back to the CPU, or NULL when it did not: the caller decides whether
 * that is worth telling the user. */
const char *kb_fallback_reason(void);
/* The devices this build can use, "cpu" or "cpu, cuda" (whether a GPU answers is kb_create's). */
const char *kb_devices_built(void);
/* First thing in main: what the backends' libraries need settled before any of them runs (under a
 * memory limit the process may start again, with the same arguments). */
void kb_process_start(char **argv);

#ifdef __cplusplus
}
#endif

#endif
