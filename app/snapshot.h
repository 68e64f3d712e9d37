/* KV snapshots (FILE.kv beside a session): every conversation's cached rows, so resuming costs a file
 * read instead of a prefill. Binary: a header (magic, version, model fingerprint, cache shape), one
 * record per conversation, and a checksum over all of it. Written to a temp file and renamed. */
#ifndef KVCHAT_SNAPSHOT_H
#define KVCHAT_SNAPSHOT_H

#include "engine.h"

int snapshot_save(const char *path, engine *e, const loaded_model *lm, const char *fingerprint);
/* Loads the rows of every conversation it holds into the engine's (restored, empty) caches. Returns
 * 0 when loaded; -1 with the reason (missing, other model, damaged) when the caller must re-prefill. */
int snapshot_load(const char *path, engine *e, const loaded_model *lm, const char *fingerprint);

#endif
