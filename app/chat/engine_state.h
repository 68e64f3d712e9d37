/* The engine as its own files share it, in layers that call only downwards: conv.c (a
 * conversation's state and helpers, the preparation thread), turn.c (a turn, a retry, an edit),
 * worker.c (the reply's thread) and engine.c (the public verbs). Not part of the engine's public
 * header. */
#ifndef KVCHAT_ENGINE_STATE_H
#define KVCHAT_ENGINE_STATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "conv.h"
#include "engine.h"
#include "../../model/reading.h"
#include "fidelity.h"

struct engine {
    loaded_model *lm;
    model_opts mo;
    engine_opts o;
    evict_rule rule; /* rule.window: the tokens a conversation's cache holds at most */
    conv **convs;
    int n_convs, next_id;
    size_t cap_convs;
    float *logits;
    int next; /* the token the last forward pass chose */
    fidelity fid;
    engine_text_fn on_text;
    void *text_ctx;
    atomic_int cancel, done;
    pthread_t worker;
    int running, job_conv, job_rc;
    const int *forced; /* engine_force_reply: the next reply's tokens */
    int n_forced;
    engine_logits_fn on_logits;
    void *logits_ctx;
    int have_pending;   /* a /set during a reply: applied when the reply ends */
    model_opts pending; /* mo as it will be then */
    char *job_text, *job_reply;
    char *system; /* the system preamble of conversations still to start, or NULL */
    char job_err[1024];
    pthread_t prep_thread; /* a prepared eviction being made between turns */
    int preparing;
    atomic_int prep_stop;
    conv *prep_conv;
    rd_reading reading;  /* where the reply's tokens read (engine_opts.attention) */
    drafter *draft_root; /* --draft: the drafter the conversations' own are cloned from */
    spec *spec;          /* ... and the rounds (one reply runs at a time) */
};

/* ---- conv.c: a conversation's state and helpers, and the preparation thread (the bottom) ---- */
/* conversation `id`, or NULL with the error */
conv *eng_find(const engine *e, int id);
/* the same for a call that changes it: NULL with the error while a reply runs (after making a
 * prepared eviction give way) */
conv *eng_find_idle(engine *e, int id);
int eng_refuse_while_running(const engine *e);
int eng_push_ids(conv *c, const int *ids, int n);
int eng_push_turn(conv *c, int role, int start);
/* the index of c's last turn of `role`, or -1 */
int eng_last_turn(const conv *c, int role);
/* c's window and cache back to its first `to` tokens (a truncate event) */
int eng_rollback(conv *c, int to);
/* a reply stopping inside a speculative round: the cache and the drafter's back to the window */
int eng_spec_unwind(engine *e, conv *c);
/* a notice that `what` had `bytes` bytes that are not UTF-8, read as Latin-1 */
void eng_latin1_notice(engine *e, int conv_id, const char *what, int bytes);
/* the stats event of c, from the thread its turn runs on */
void eng_stats(engine *e, const conv *c);
/* the thread that prepares c's next eviction between turns: waited for; stopped (within a layer)
 * and waited for; started after a turn of c */
void eng_prep_wait(engine *e);
void eng_prep_halt(engine *e);
void eng_prep_begin(engine *e, conv *c);

/* ---- turn.c: a turn, a retry, an edit (above conv.c) ---- */
/* what a forward pass leaves for the reply's next token: nothing, the logits (the token is given:
 * engine_force_reply reads them, and no sampling is wasted on it), or the token drawn (e->next) */
enum { ENG_NOTHING, ENG_LOGITS, ENG_DRAW };
/* new tokens through the model, leaving `next` (ENG_*) */
int eng_forward(engine *e, conv *c, const int *ids, int n, int next);
/* what the step before the reply's token `made` leaves (ENG_*) */
int eng_next(const engine *e, int made);
/* a turn (a message and its reply), or a retry of the last reply, on the caller's thread or the
 * worker's; *out gets the reply */
int eng_run_turn(engine *e, int id, const char *text, char **out);
int eng_run_retry(engine *e, int id, char **out);
/* the turn of the reply a retry replaces, or -1 with the reason there is none */
int eng_retry_turn(const conv *c);
/* an edit's first half: the last message and its reply rolled back; NULL with the error */
conv *eng_edit_rollback(engine *e, int id);

/* ---- worker.c: the reply's thread (above turn.c); engine.c, on top, may call all of these ---- */

#endif
