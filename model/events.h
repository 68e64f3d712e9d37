/* The event stream: everything the cache and the chat engine do, as JSON objects
 * {"ev": TYPE, "conv": ID, "t": SECONDS, ...}. The --events log, the session file, the cache panel
 * and the tests all subscribe to the same bus. Emitting is thread-safe; sinks run in the emitter's
 * thread, one at a time. */
#ifndef KVCHAT_EVENTS_H
#define KVCHAT_EVENTS_H

#include <jansson.h>

/* The event types, written once: the emitters, the session reader, the panel and replay all name
 * them here. */
#define EV_MODEL "model"
#define EV_NEW "new"
#define EV_USER "user"
#define EV_PREFILL "prefill"
#define EV_TOKEN "token"
#define EV_GROW "grow"
#define EV_COW "cow"
#define EV_EVICT "evict"
#define EV_PREPARE "prepare"
#define EV_TRUNCATE "truncate"
#define EV_FORK "fork"
#define EV_OFFLOAD "offload"
#define EV_RESTORE "restore"
#define EV_STATS "stats"
#define EV_FIDELITY "fidelity"
#define EV_NOTICE "notice"
#define EV_PIN "pin"
#define EV_RETRY "retry"
#define EV_EDIT "edit"
#define EV_CLEAR "clear"
#define EV_SET "set"
#define EV_TURN_END "turn_end"
#define EV_RESUME "resume"
#define EV_SYSTEM "system"
#define EV_TYPES                                                                             \
    EV_MODEL, EV_NEW, EV_USER, EV_PREFILL, EV_TOKEN, EV_GROW, EV_COW, EV_EVICT, EV_TRUNCATE, \
        EV_FORK, EV_OFFLOAD, EV_RESTORE, EV_STATS, EV_FIDELITY, EV_NOTICE, EV_PIN, EV_RETRY, \
        EV_EDIT, EV_CLEAR, EV_SET, EV_TURN_END, EV_RESUME, EV_PREPARE, EV_SYSTEM

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
