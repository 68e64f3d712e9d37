/* A GPT-2 checkpoint in memory: config, tokenizer-independent weights, and the forward pass. */
#ifndef KVCHAT_GPT2_H
#define KVCHAT_GPT2_H

#include <stdatomic.h>
#include <stdint.h>

#include "../kernels/backend.h"
#include "config.h"
#include "kvcache.h"
#include "safetensors.h"

/* Shapes: C = n_embd, V = vocab_size, P = n_ctx, T = the tokens of the largest batch so far. */
typedef struct {
    const float *ln1_g, *ln1_b; /* [C] */
    const float *attn_b;        /* [3C] */
    const float *proj_b;        /* [C] */
    const float *ln2_g, *ln2_b; /* [C] */
    const float *fc_b;          /* [4C] */
    const float *fcproj_b;      /* [C] */
    kb_mat attn_w;              /* [C, 3C]: q, k, v */
    kb_mat proj_w;              /* [C, C] */
    kb_mat fc_w;                /* [C, 4C] */
    kb_mat fcproj_w;            /* [4C, C] */
} gpt2_layer;

typedef struct {
    gpt2_config cfg;
    dtype wtype;                /* dtype of the big matrices as used for compute */
    dtype file_type;            /* dtype in the checkpoint (of wte) */
    const char *file;           /* the checkpoint's name in its directory (model/checkpoint.h) */
    kb_mat wte;                 /* [V, C], also the LM head */
    kb_mat wpe;                 /* [P, C] */
    const float *lnf_g, *lnf_b; /* [C] */
    gpt2_layer *layers;         /* [n_layer] */
    st_file st;
    void **owned; /* buffers the loader allocated (converted weights) */
    size_t n_owned, cap_owned;
    kb_backend *placed; /* weights copied into (or packed for) this backend, or NULL */
    void **placed_bufs;
    int n_placed;
    /* activations for the largest batch seen so far, in the backend's memory */
    kb_backend *work_backend;
    float *x;      /* [T, C] the residual stream */
    float *h;      /* [T, C] a layernorm's output, or a projection's before it is added */
    float *qkv;    /* [T, 3C] */
    float *att;    /* [T, C] attention's output, heads side by side */
    float *fc;     /* [T, 4C] after GELU */
    float *logits; /* [V] the last token's; [head_rows, V] after a verify pass */
    int work_tokens, logit_rows, head_rows; /* rows the logits hold room for, and filled last */
    int head_at;                            /* the row the LM head writes first (gpt2_judge's) */
    const atomic_int *yield; /* gpt2_forward_yielding's flag: set, a pass stops between layers */
    /* set by the caller: each one-token step fills it (kernels/backend.h: the weight each head
     * of each layer gave each span of the window, the turns); NULL: off, and nothing is spent */
    const kb_probe *probe;
    /* set by the caller: positions the cache no longer holds whose tokens kept where they were
     * computed (token-level eviction, kvchat bench --policy's text track): new tokens go in at
     * position kv_len + pos_offset. 0 for everything else. */
    int pos_offset;
} gpt2_model;

/* Told how far a long load has come: stage names the work, fraction is 0..1. */
typedef struct {
    void (*fn)(void *ctx, const char *stage, double fraction);
    void *ctx;
} gpt2_progress;

/* Loads DIR/config.json and DIR's weights (model/checkpoint.h), keeping weights in `wtype`
 * (converted when the file holds another dtype; mapped in place when it matches). progress may be
 * NULL. */
int gpt2_load(gpt2_model *m, const char *dir, dtype wtype, const gpt2_progress *progress);
/* Before the backend it ran on is destroyed: its activations and placed weights are that backend's.
 */
void gpt2_free(gpt2_model *m);
/* Copies the weights into the backend's memory when it is not host memory (a GPU); on the CPU,
 * packs the products' weights in the backend's own layout (kb_backend.pack). */
int gpt2_place(gpt2_model *m, kb_backend *b, const gpt2_progress *progress);
int64_t gpt2_param_count(const gpt2_config *c);
/* Bytes of weights streamed to produce one token: every matrix once plus the LM head. */
uint64_t gpt2_bytes_per_token(const gpt2_model *m);
/* bytes of all the weights as loaded (the vectors in f32; q8 and q4 with their scales) */
uint64_t gpt2_weights_bytes(const gpt2_model *m);
/* Activation memory for a batch of n tokens (what the forward pass allocates). */
size_t gpt2_workspace_bytes(const gpt2_config *c, int n);

/* Runs n tokens at positions kv_len(cache).. through the model, appends their keys and values to
 * the cache (reserving room first), and writes the last token's logits (vocab_size floats) to
 * logits (if not NULL). On failure the cache keeps its previous length. */
int gpt2_forward(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n, float *logits);
/* gpt2_forward without logits for work in the background: when *stop becomes nonzero it gives way
 * before the next layer, returning 1 with the cache as it was. 0 done, -1 failed. */
int gpt2_forward_yielding(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
                          const atomic_int *stop);
/* gpt2_forward, and when pick is given the next token chosen on the backend from those logits into
 * *next (only its id leaves the device). */
int gpt2_step(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
              const kb_sample *pick, int *next, float *logits);
/* gpt2_forward with the logits of every one of the n positions: logits gets n rows of vocab_size
 * floats (host memory), row i the logits of the token after ids[i] (a speculative verify pass). Run
 * as passes of at most the backend's step_rows positions, so that each row is bit for bit what
 * decode steps give where the backend promises it; n = 1 is a plain step. Never recorded by the
 * backend. On failure the cache keeps its previous length. */
int gpt2_verify(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n, float *logits);
/* gpt2_verify with the rule's figures of each row in place of its logits (kb_backend.odds: row i's
 * draws s[i], the rows sharing s[0]'s settings and history, s[i].n_history = s[0].n_history + i;
 * drafts[i] the id it judges, -1 none; u_rest[i] its residual's draw): only those leave the
 * device. The rows' logits stay for gpt2_row_logits until the next pass. */
int gpt2_judge(gpt2_model *m, kb_backend *b, kv_seq *cache, const int *ids, int n,
               const kb_sample *s, const int *drafts, const double *u_rest, kb_odds *odds);
/* Row `row` of the last pass's logits (vocab_size floats) into host memory: a verify or judged
 * pass's rows, else the last token's alone. */
int gpt2_row_logits(gpt2_model *m, int row, float *out);
/* The logits of the last pass that computed them (vocab_size floats), into host memory. */
int gpt2_last_logits(gpt2_model *m, float *out);

#endif
