/* kvchat replay's parts: the command (replay.c: the transcript and --verify) and its playback on
 * the chat's view (replay_play.c). */
#ifndef KVCHAT_REPLAY_H
#define KVCHAT_REPLAY_H

#include "../session/session.h"

/* plays s (read from path) back full-screen until q; the exit status */
/* idle: the longest pause played, in seconds (0: every pause as recorded) */
int replay_play(const session *s, const char *path, double idle);

#endif
