/* The --events FILE sink: one JSON object per line, flushed as it happens. A failed write is kept
 * (the first one's reason) and reported once, when the log is closed. */
#ifndef KVCHAT_EVENTS_LOG_H
#define KVCHAT_EVENTS_LOG_H

#include <stdio.h>

#include "../model/events.h"

typedef struct {
    FILE *f;
    ev_bus *bus;
    int err; /* errno of the first failed write, 0 while all went well */
} events_log;

/* Refused: a file another kvchat writes (a live session or event log: they hold it locked), a
 * session file, and without force any other file that is not empty. It keeps its file locked. */
int events_log_open(events_log *l, const char *path, int force, ev_bus *bus);
/* Stops logging and closes the file: 0, or the errno of the first failed write. */
int events_log_close(events_log *l);

#endif
