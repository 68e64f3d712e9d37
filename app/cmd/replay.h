/* kvchat replay's parts: the command and the transcript (replay.c), --verify (replay_verify.c) and
 * the playback on the chat's view (replay_play.c). */
#ifndef KVCHAT_REPLAY_H
#define KVCHAT_REPLAY_H

#include "../chat/runtime.h"
#include "../session/session.h"

/* plays s (read from path) back full-screen until q; the exit status */
/* idle: the longest pause played, in seconds (0: every pause as recorded) */
int replay_play(const session *s, const char *path, double idle);
/* --verify of s (read from path) with the model of mo (force: another than it names), its logits
 * to dump_path (or NULL), draft in place of the recorded drafter (or NULL), the model options of
 * the command line (argc, argv) over the recorded settings; the exit status */
int replay_verify(const session *s, const char *path, const model_opts *mo, int force,
                  const char *dump_path, const char *draft, int argc, char **argv);

#endif
