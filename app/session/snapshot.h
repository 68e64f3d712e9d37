/* KV snapshots (FILE.kv beside a session): every conversation's cached rows, so resuming costs a
 * file read instead of a prefill. Binary: a header (magic, version, model fingerprint, cache
 * shape), one record per conversation (its id, length, completed turns, a hash of its window's
 * token ids, its rows), and a checksum over all of it. Written to a temp file and renamed. A
 * snapshot is only used for the exact point of the session it was taken at. With --draft,
 * PATH.draft beside it holds the drafters' caches the same way, under the draft model's fingerprint
 * (its checkpoint and weights' type), each the prefix of its window that it holds. */
#ifndef KVCHAT_SNAPSHOT_H
#define KVCHAT_SNAPSHOT_H

#include "../chat/engine.h"

int snapshot_save(const char *path, engine *e, const loaded_model *lm, const char *fingerprint);
/* Loads the rows of every conversation it holds into the engine's (restored, empty) caches. Returns
 * 0 when loaded; -1 with the reason (missing, other model, damaged, another point of the session)
 * when the caller must re-prefill. */
int snapshot_load(const char *path, engine *e, const loaded_model *lm, const char *fingerprint);
/* With --draft, the drafters' caches from PATH.draft (which snapshot_save writes beside PATH) into
 * their (restored, empty) caches: 0 loaded, 1 none to load (no model drafter, no such file), -1
 * with the reason (then each drafter re-prefills at its first pass, as without it). */
int snapshot_load_drafts(const char *path, engine *e, const loaded_model *lm,
                         const char *fingerprint);
/* After each completed turn: the snapshot at PATH follows the session (save), or is removed, since
 * it no longer matches the session's end. */
int snapshot_follow(const char *path, int save, engine *e, const loaded_model *lm,
                    const char *fingerprint);
/* Removes PATH.part, left by a snapshot write that was killed (the caller holds the session's
 * lock). */
void snapshot_remove_part(const char *path);

#endif
