/* The sessions the chat saved (session_dir): listed newest first, and the newest, for --resume last
 * and for replay given no file. */
#ifndef KVCHAT_SESSIONS_H
#define KVCHAT_SESSIONS_H

#include <stddef.h>

/* The newest saved session's path; an error naming the folder when there is none. */
int sessions_latest(char *buf, size_t n);
/* Prints up to max of them, a row each (began, turns, model, size, file). */
int sessions_print(int max);

#endif
