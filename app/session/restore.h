/* A session's conversations brought back into an engine, as their last completed turns left them:
 * how chat --resume continues a session, and how --verify takes up a run resumed with other
 * settings. A turn without a turn_end (cut by a crash) was never made. */
#ifndef KVCHAT_RESTORE_H
#define KVCHAT_RESTORE_H

#include "session.h"

/* Each conversation of the first `upto` events restored into e (their caches still empty): at its
 * last turn_end, or, with no turn of its own yet, as it was made (a fork as its parent was then, a
 * /new empty); *order gets their ids (the caller frees it), by id, the one the session last acted
 * in last; *n their count. -1 with the error when no turn was completed or one cannot be restored.
 */
int session_restore(engine *e, const session *s, int upto, int **order, int *n);

#endif
