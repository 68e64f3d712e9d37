/* The event stream: everything the cache and the chat engine do, as JSON objects
 * {"ev": TYPE, "conv": ID, "t": SECONDS, ...}. The --events log, the session file, the cache panel
 * and the tests all subscribe to the same bus. Emitting is thread-safe; sinks run in the emitter's
 * thread, one at a time. */
#ifndef KVCHAT_EVENTS_H
#define KVCHAT_EVENTS_H

#include <jansson.h>

/* The event types and their fields: event_schema.h (EVK_PREFILL, ev_prefill, ev_check, the typed
 * accessors). */
#include "event_schema.h"

typedef struct ev_bus ev_bus;
typedef void (*ev_sink)(void *ctx, json_t *ev);

ev_bus *ev_bus_create(void);
void ev_bus_free(ev_bus *b);
int ev_subscribe(ev_bus *b, ev_sink sink, void *ctx);
void ev_unsubscribe(ev_bus *b, ev_sink sink, void *ctx);
/* Sends {"ev": "prefill", "conv": conv, "t": now, ...its fields} to every sink, the fields in the
 * schema's order: ev_emit_prefill(bus, conv, &(ev_prefill){.ids = ids, .n_ids = n, ...}). A NULL
 * bus drops the event, as does a lack of memory. */
#define EV_EMITTER(NAME, name, doc) void ev_emit_##name(ev_bus *b, int conv, const ev_##name *ev);
EV_SCHEMA(EV_EMITTER, EV_SKIP_FIELD)
#undef EV_EMITTER
/* the JSON of a sampling block (a set event's, a turn_end's, the session header's) and of a cache
 * block: new references, NULL when out of memory */
json_t *ev_sampling_json(const ev_sampling *s);
json_t *ev_cache_json(const ev_cache *c);
json_t *ev_cacheset_json(const ev_cacheset *c);
json_t *ev_chatset_json(const ev_chatset *c);
double ev_now(const ev_bus *b); /* seconds since the bus was created */
double ev_clock(void);          /* monotonic seconds, for measuring durations */
/* The process stops (SIGTSTP) and continues: ev_clock leaves the time between out, so no duration
 * measured across a Ctrl-Z (a token's, a reply's tok/s) counts it. Async-signal-safe. */
void ev_clock_stop(void);
void ev_clock_continue(void);
/* A SIGTSTP handler's stop: the process stops (SIGSTOP, not SIGTSTP again: an orphaned process
 * group, with no shell above, would discard that) between ev_clock_stop and ev_clock_continue. */
void ev_clock_stop_process(void);

#endif
