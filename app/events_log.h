/* The --events FILE sink: one JSON object per line, flushed as it happens. */
#ifndef KVCHAT_EVENTS_LOG_H
#define KVCHAT_EVENTS_LOG_H

#include <stdio.h>

#include "../model/events.h"

typedef struct {
    FILE *f;
} events_log;

int events_log_open(events_log *l, const char *path, ev_bus *bus);
void events_log_close(events_log *l);

#endif
