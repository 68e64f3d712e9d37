/* Session files: JSON Lines. A header (format version, kvchat version, model name and fingerprints,
 * backend, every sampling, cache and chat setting), then the event stream as it happened (the same
 * events as --events, with the user's text and each token's id, text and timing), with a turn_end
 * record closing each turn: the window, its turns and the sampler state, enough to resume exactly.
 * Session files are shared between people, so reading one trusts nothing in it. */
#ifndef KVCHAT_SESSION_H
#define KVCHAT_SESSION_H

#include <stddef.h>
#include <stdio.h>

#include "../chat/engine.h"

/* 2: tokens are chosen by the integer sampling rule (kernels/cpu/sample.c); format 1 files still
 * read */
#define SESSION_FORMAT 2
#define SESSION_MAX_LINE (16u << 20)
/* the highest conversation id a session may hold (the reader refuses more) */
#define SESSION_MAX_CONV EV_CONV_MAX
/* the largest cache pool a session may name (--cache-mem accepts less) */
#define SESSION_MAX_POOL ((long long)1 << 50)

/* ---- writing ---- */

typedef struct {
    FILE *f;
    char path[4096];
    int failed;
} session_writer;

/* The settings a run's results depend on, besides sampling: the weights' type and the cache's and
 * the chat's settings, as the schema types them (the header holds them with sampling; a resume
 * event holds a resumed run's). chat.draft_fingerprint points into draft_fp: used in place. */
typedef struct {
    const char *weights_dtype;
    ev_cacheset cache;
    ev_chatset chat;
    char draft_fp[17];
} session_settings;
/* 0, or -1 when a draft model's fingerprint cannot be read */
int session_settings_of(session_settings *s, const loaded_model *lm, const engine_opts *eo);
json_t *session_header(const loaded_model *lm, const model_opts *mo, const engine_opts *eo);
/* the model directory's last component, as the header and the model event name it */
const char *session_model_name(const loaded_model *lm);
/* The `model` event (what the cache panel shows about the model and its memory) on lm's bus: each
 * chat run emits it once, full-screen or not, so that every session records it. */
void session_emit_model(loaded_model *lm);
typedef enum { SESSION_NEW, SESSION_APPEND, SESSION_OVERWRITE } session_mode;

/* Opens PATH for this run, locked against a second writer: SESSION_APPEND continues the session in
 * it (a last line cut by a crash is first cut away, its bytes kept in PATH.damaged); otherwise PATH
 * becomes a new session with `header`, which SESSION_NEW refuses to do over a non-empty file. Then
 * subscribes to the bus: every event is written as it happens; each turn_end is flushed and fsync'd
 * before the turn returns. */
int session_open(session_writer *w, const char *path, session_mode mode, const json_t *header,
                 ev_bus *bus);
void session_close(session_writer *w, ev_bus *bus);
/* The session's length in bytes now (-1 when not writing), and the session cut back to such a
 * length: a resume that failed leaves no trace, so the next one finds the file as it was */
long long session_tell(session_writer *w);
int session_cut(session_writer *w, long long at);
/* ${XDG_DATA_HOME:-~/.local/share}/kvchat/sessions: where the chat saves sessions by default */
int session_dir(char *buf, size_t n);
/* session_dir()/YYYY-MM-DD-HHMMSS.jsonl */
int session_default_path(char *buf, size_t n);
/* Writes header + events as a new session file (temp file, renamed into place). */
int session_write_file(const char *path, const json_t *header, json_t *const *events, int n);
/* Conversation `conv` of a chat's n events as a session of its own (extract.c): its events and,
 * for a fork, its parent's up to the fork (and so on up), numbered 1, 2, ... in the order they
 * were made, among the events of no conversation (settings, /system); *k counts them (each held:
 * the caller decrefs them and frees the array). NULL with the error when memory ran out. */
json_t **session_extract(json_t *const *evs, int n, int conv, int *k);

/* ---- reading ---- */

typedef struct {
    json_t *header;
    json_t **events;
    int n_events;
    size_t cap;
    int truncated; /* the last line was cut (a crash mid-write): everything before it is kept */
    int lines;
    int window, vocab; /* the largest window and vocabulary of the header and resume events: every
                        * position and token id in the file lies within them */
} session;

int session_parse(session *s, const char *buf, size_t len, const char *name);
int session_read(session *s, const char *path);
void session_free(session *s);
/* The settings in force after the first `upto` events applied to mo and eo: the header's, then each
 * resume event's, set event's sampling and /system text (resume and verify run as the session did).
 */
int session_settings_at(const session *s, int upto, model_opts *mo, engine_opts *eo);
/* -1 (the error naming both) when the session recorded a draft model whose fingerprint the drafter
 * eo names now does not have (another checkpoint at that folder, or another folder's); 0 when it is
 * the same, or nothing was recorded to compare */
int session_draft_same(const session *s, const engine_opts *eo);

/* How many of the settings differ between r/re and m/e, and their option names ("--ctx, -n") */
int session_settings_diff(const model_opts *r, const engine_opts *re, const model_opts *m,
                          const engine_opts *e, char *names, size_t n);

#endif
