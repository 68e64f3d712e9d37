/* The event stream: everything the cache and the chat engine do, as JSON objects
 * {"ev": TYPE, "conv": ID, "t": SECONDS, ...}. The --events log, the session file, the cache panel
 * and the tests all subscribe to the same bus. Emitting is thread-safe; sinks run in the emitter's
 * thread, one at a time. */
#ifndef KVCHAT_EVENTS_H
#define KVCHAT_EVENTS_H

#include <jansson.h>

/* The event types and their fields: event_schema.h (EV_PREFILL, ev_check, the typed accessors). */
#include "event_schema.h"

typedef struct ev_bus ev_bus;
typedef void (*ev_sink)(void *ctx, json_t *ev);

ev_bus *ev_bus_create(void);
void ev_bus_free(ev_bus *b);
int ev_subscribe(ev_bus *b, ev_sink sink, void *ctx);
void ev_unsubscribe(ev_bus *b, ev_sink sink, void *ctx);
/* Sends {"ev": type, "conv": conv, "t": now, ...fields}; takes ownership of fields (an object or
 * NULL). A NULL bus drops the event. */
void ev_emit(ev_bus *b, int conv, const char *type, json_t *fields);
/* whether the event ev (an object with an "ev" string) has type `type` */
int ev_is(const json_t *ev, const char *type);
double ev_now(const ev_bus *b); /* seconds since the bus was created */
double ev_clock(void);          /* monotonic seconds, for measuring durations */

#endif
