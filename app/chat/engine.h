/* The chat engine: conversations whose KV cache lives across turns, exact sliding-window eviction,
 * forks, rollbacks, the fidelity check, and the events of all of it. The TUI and `chat --no-tui`
 * both drive it; a turn runs on its own thread and can be cancelled between tokens. */
#ifndef KVCHAT_ENGINE_H
#define KVCHAT_ENGINE_H

#include <stddef.h>

#include "../../model/speculate.h"
#include "../../model/window.h"
#include "eviction.h"
#include "runtime.h"
#include "template.h"

/* The longest message a turn takes, in bytes: far past any window, and well inside a session line.
 */
#define ENGINE_MAX_MESSAGE (256 * 1024)

typedef struct {
    template_kind tpl;
    const char *tpl_why; /* why this template (for /show); NULL until chosen: then the model's */
    const char *system;  /* --system: the preamble of new conversations instead of the template's */
    int keep;            /* tokens never evicted; -1: the template's preamble */
    int evict_min;       /* at least this many per eviction; 0: a quarter of the window */
    evict_mode evict;
    win_when evict_at;   /* --evict-at: turn (room for the reply at its turn's start) or full */
    int fidelity;        /* check every N generated tokens; 0: off */
    double idle_offload; /* offload conversations idle this many seconds; 0: only when the pool is
                            full */
    int prepare;         /* prepare the next exact eviction between turns (--prepare-evict) */
    int max_convs;       /* /new and /fork refuse a conversation numbered past it; 0: no limit */
    int attention;       /* attention events every this many reply tokens (and at a reply's end,
                            model/reading.h); 0: off, and nothing is spent on them */
    win_policy policy;   /* --evict least-read: the least-read turns go first (attention is on) */
    draft_opts draft;    /* --draft: speculative decoding, a drafter per conversation (off: kind
                            DRAFT_NONE); its rounds need attention off */
} engine_opts;

/* --attention on: an attention event every this many reply tokens */
#define ENGINE_ATTENTION_EVERY 16

typedef struct engine engine;

/* Called from the generation thread with each piece of complete UTF-8 text of a reply. */
typedef void (*engine_text_fn)(void *ctx, int conv, const char *text, size_t len);

engine *engine_create(loaded_model *lm, const model_opts *mo, const engine_opts *eo);
void engine_free(engine *e);
void engine_on_text(engine *e, engine_text_fn fn, void *ctx);
/* Teacher forcing, for comparing backends: the next reply appends ids[0..n) in order in place of
 * the tokens it draws (then draws, should it go on), and fn gets the logits (vocab floats) each of
 * its tokens is taken from, before the token goes in. ids must stay valid until that reply ends. */
typedef void (*engine_logits_fn)(void *ctx, const float *logits, int vocab);
void engine_force_reply(engine *e, const int *ids, int n, engine_logits_fn fn, void *ctx);

/* Conversations are numbered from 1; returns the new id or -1. */
int engine_new_conv(engine *e);
int engine_fork(engine *e, int conv);
int engine_conv_count(const engine *e);
int engine_conv_id(const engine *e, int index);

/* Runs one turn to the end in the calling thread; *reply (malloc'd) gets the reply text. */
int engine_turn(engine *e, int conv, const char *text, char **reply);
/* The same on the engine's thread: start, then wait (cancel makes it stop between tokens). A NULL
 * text retries the last reply instead (engine_retry). */
int engine_turn_start(engine *e, int conv, const char *text);
int engine_turn_wait(engine *e, char **reply);
void engine_cancel(engine *e);
/* Waits for the eviction being prepared since the last turn (--prepare-evict) to be ready, instead
 * of making it give way as every other call does: for tests and benchmarks that want it in place.
 */
void engine_settle(engine *e);
/* Whether a started turn has finished (engine_turn_wait will not block). */
int engine_turn_done(const engine *e);
/* New sampling settings for every conversation's next reply (a new seed restarts its stream). While
 * a started turn runs they wait for its end (engine_turn_wait applies them and emits the set event
 * then); returns 1 when they wait, else 0. */
int engine_set_sampling(engine *e, const sampler_params *sp, int n_predict);
/* The settings the next reply will use. */
const model_opts *engine_model_opts(const engine *e);
/* Generates the last reply again, rolling the cache back to before it. */
int engine_retry(engine *e, int conv, char **reply);
/* 0 when engine_retry can run, else -1 with the reason (no reply last; it evicted what it
 * answered). */
int engine_can_retry(const engine *e, int conv);
/* Replaces the last user message (and the reply to it) with `text`, rolling the cache back to
 * before it, and replies. */
int engine_edit(engine *e, int conv, const char *text, char **reply);
/* engine_edit with the reply generated on the worker thread, as engine_turn_start does it. */
int engine_edit_start(engine *e, int conv, const char *text);
/* Removes every turn (the cache rolls back to the kept prefix). */
int engine_clear(engine *e, int conv);
int engine_pin(engine *e, int conv, int turn, int pinned);
/* At WIN_RANKED (kvchat bench --policy's random control and oracle): the order in which the next
 * evictions take the conversation's turns, the lowest rank first; rank[i] for turn i, n the turns
 * engine_turns gives. */
int engine_rank(engine *e, int conv, const float *rank, int n);
/* The system preamble of conversations whose first message is still to come (NULL or "": the
 * template's own); recorded as a system event. */
int engine_set_system(engine *e, const char *text);
/* The sampler's state of a conversation, as a recording left it: a reply stopped by Ctrl-C may have
 * drawn once more than the same reply ending at its length, and replay --verify must go on from
 * where the recorded chat went on. */
int engine_set_rng(engine *e, int conv, uint64_t rng);
/* The system preamble now, or NULL. */
const char *engine_system(const engine *e);

/* A conversation as a session recorded it (its last turn_end, the turn_end records it has), under
 * its recorded id, with an empty cache: the caller loads a KV snapshot into engine_conv_cache or
 * calls engine_prefill_window. */
int engine_restore(engine *e, int id, const int *ids, int n, const win_turn *turns, int n_turns,
                   int keep, const sampler_params *sp, uint64_t rng, int approximate,
                   int turns_done);
/* Recomputes the cache of the whole window (in chunks, reporting progress when given). */
int engine_prefill_window(engine *e, int id, void (*progress)(void *ctx, int done, int total),
                          void *ctx);
kv_seq *engine_conv_cache(engine *e, int id);
int engine_window_len(const engine *e, int id);
/* The turn_end records the conversation has (restored ones included). */
int engine_turns_done(const engine *e, int id);

/* What the model sees now: the window's token ids and its turns (valid until the next change). The
 * turns are refused while a reply is generated (*n = -1, the error set). */
const int *engine_window(const engine *e, int conv, int *n);
const win_turn *engine_turns(const engine *e, int conv, int *n);
/* The cached logits of the last position (vocab floats); the tests compare them with a fresh pass.
 */
const float *engine_logits(engine *e);
/* Writes the conversation's stats event now. */
void engine_stats(engine *e, int conv);
/* Conversation id's drafter (NULL: none, or no such conversation). */
drafter *engine_drafter(engine *e, int id);
/* Speculative decoding's counts over every reply so far (NULL: no --draft, or a reply is being
 * generated). */
const spec_stats *engine_spec_stats(const engine *e);

#endif
