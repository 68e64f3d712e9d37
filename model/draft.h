/* Drafters for speculative decoding: what proposes the tokens the model then checks in one pass
 * (model/speculate.h). Three kinds:
 *   lookup   the tokens that followed an earlier occurrence of the context's last n-gram (n from
 *            DRAFT_NGRAM_MAX down to DRAFT_NGRAM_MIN; the latest with enough of them): no second
 *            model;
 *   self-q8  the model's own checkpoint loaded again with q8 weights;
 *   DIR      another GPT-2 checkpoint with the same vocabulary (distilgpt2 or gpt2 for the larger
 *            ones), refused when its vocabulary differs.
 * A model drafter keeps its own cache of the context between rounds (its positions run ahead of
 * the model's by the drafted tokens, and are cut back to what was accepted). Its length adapts:
 * it stops drafting where its most likely token's probability falls under min_prob, decided
 * before it draws. */
#ifndef KVCHAT_DRAFT_H
#define KVCHAT_DRAFT_H

#include <stdint.h>

#include "gpt2.h"
#include "kvcache.h"
#include "sampler.h"

enum { DRAFT_NGRAM_MIN = 1, DRAFT_NGRAM_MAX = 4, DRAFT_MAX_TOKENS = 15 };

typedef enum { DRAFT_NONE, DRAFT_LOOKUP, DRAFT_SELF_Q8, DRAFT_MODEL } draft_kind;

typedef struct {
    draft_kind kind;
    const char *dir; /* DRAFT_MODEL's checkpoint */
    int max;         /* at most this many tokens a round (default 4) */
    float min_prob;  /* a model drafter stops where its peak is under this (0.5) */
} draft_opts;

void draft_opts_default(draft_opts *o);
/* "lookup", "self-q8", "off" or a checkpoint directory that exists; a one-line error otherwise */
int draft_parse(const char *spec, draft_opts *o);
/* the same as a session recorded it: a checkpoint's directory is taken as named (it is looked for
 * when the drafter loads, and may have moved) */
int draft_parse_recorded(const char *spec, draft_opts *o);
/* what o names, for messages and records: "lookup", "self-q8", the directory, or "off" */
const char *draft_name(const draft_opts *o);

typedef struct drafter drafter;

/* A drafter for the model m (loaded from model_dir) on backend b; a model drafter's cache is a
 * sequence of the model's pool when the shapes match (self-q8), else of a pool of its own on the
 * same bus, its events naming conversation conv with their totals marked draft (conv < 0: no cache,
 * a drafter only to clone from). NULL with the error set (a checkpoint that does not load, another
 * vocabulary: both named). */
drafter *draft_new(const draft_opts *o, const gpt2_model *m, const char *model_dir, kb_backend *b,
                   kv_pool *pool, int conv);
/* Another drafter on d's model (loaded once: d, or the drafter d was cloned from, must outlive it)
 * for conversation conv: its cache empty, or with_cache a fork of d's (sharing its blocks). */
drafter *draft_clone(drafter *d, int conv, int with_cache);
void draft_free(drafter *d);

/* Proposes up to max tokens to follow ids[0..n) into out, *n_out of them (0: nothing to propose).
 * With sampling (s->p.temp > 0) a model drafter samples each from its own distribution under the
 * same settings, drawn from s, and q gets that distribution (vocab doubles a token, host memory):
 * the rejection rule needs it; lookup's is the certain token (q untouched). Greedy: the drafter's
 * penalised argmax. */
int draft_propose(drafter *d, const int *ids, int n, sampler *s, int max, int *out, int *n_out,
                  double *q);
/* The context is now ids[0..n): a model drafter cuts its cache back to what of it still holds. */
int draft_settle(drafter *d, const int *ids, int n);
/* A model drafter's cache for the context ids[0..n) made in the background beside the model's
 * prepared eviction (kv_fork_background: from what of its cache still holds), or NULL (lookup, a
 * window too small, *stop set first, or a failure). */
kv_seq *draft_prepare(drafter *d, const int *ids, int n, const atomic_int *stop);
/* The context is now ids[0..n) after an eviction: a model drafter takes prepared (draft_prepare's
 * for these ids, or NULL) as its cache and brings it up to n now, so that the wait is the
 * eviction's, not the first draft's. prepared is taken in every case. */
int draft_catch_up(drafter *d, const int *ids, int n, kv_seq *prepared);
/* the drafter's cache sequence (NULL for lookup): counted and shown beside the model's */
kv_seq *draft_seq(drafter *d);
/* the drafter's model (NULL for lookup) */
const gpt2_model *draft_model(const drafter *d);
const draft_opts *draft_get_opts(const drafter *d);
/* the checkpoint directory a model drafter was loaded from (self-q8: the model's), else NULL */
const char *draft_dir(const drafter *d);
/* A saved cache (kv_export's rows) of ids[0..n) into the drafter's empty cache (a KV snapshot's).
 */
int draft_import(drafter *d, const int *ids, int n, const void *rows);

#endif
