/* What the chat keeps on disk, shared by the line mode and the TUI. */
#ifndef KVCHAT_CHAT_H
#define KVCHAT_CHAT_H

#include "session.h"

typedef struct {
    const char *kv_path;        /* --save-cache: the snapshot to write after each turn, else NULL */
    const char *fingerprint;    /* the model's */
    const json_t *header;       /* the session header (for /save) */
    const session *history;     /* a resumed session, shown before the new turns; NULL */
    const char *session_path;   /* where the session is being saved, or NULL */
} chat_persist;

#endif
