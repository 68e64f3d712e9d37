/* What the chat keeps on disk, shared by the line mode and the TUI. */
#ifndef KVCHAT_PERSIST_H
#define KVCHAT_PERSIST_H

#include "session.h"

typedef struct {
    const char *kv_path;      /* the snapshot beside the saved session (NULL: not saving) */
    int save_cache;           /* --save-cache: write it after each turn; else remove it then */
    const char *fingerprint;  /* the model's */
    const json_t *header;     /* the session header (for /save) */
    const session *history;   /* a resumed session, shown before the new turns; NULL */
    const json_t *resumed;    /* what this run's resume emitted (an array), after the history */
    const char *session_path; /* where the session is being saved, or NULL */
    const char *unsaved_why;  /* with no session_path: why (--no-save, or line mode's default) */
} chat_persist;

#endif
