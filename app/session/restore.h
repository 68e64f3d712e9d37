/* A session's conversations brought back into an engine, as their last completed turns left them:
 * how chat --resume continues a session, and how --verify takes up a run resumed with other
 * settings. A turn without a turn_end (cut by a crash) was never made. */
#ifndef KVCHAT_RESTORE_H
#define KVCHAT_RESTORE_H

#include "session.h"

/* Each conversation of the first `upto` events, at its last turn_end, restored into e (their caches
 * still empty); *order gets their ids (the caller frees it), in the order they first completed a
 * turn, *n their count. -1 with the error when there is none or it cannot be restored. */
int session_restore(engine *e, const session *s, int upto, int **order, int *n);

#endif
