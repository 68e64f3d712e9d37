#include "events.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kernels/err.h"

#define MAX_SINKS 8

struct ev_bus {
    pthread_mutex_t lock;
    double start;
    struct {
        ev_sink fn;
        void *ctx;
    } sinks[MAX_SINKS];
    int n_sinks;
    int check; /* KVCHAT_CHECK_EVENTS: each event emitted is held to the schema (the tests set it) */
};

double ev_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

ev_bus *ev_bus_create(void)
{
    ev_bus *b = err_calloc(1, sizeof *b, "the event bus");
    if (!b)
        return NULL;
    pthread_mutex_init(&b->lock, NULL);
    b->start = ev_clock();
    const char *check = getenv("KVCHAT_CHECK_EVENTS");
    b->check = check && *check && strcmp(check, "0");
    return b;
}

void ev_bus_free(ev_bus *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    free(b);
}

int ev_subscribe(ev_bus *b, ev_sink sink, void *ctx)
{
    pthread_mutex_lock(&b->lock);
    int rc = b->n_sinks < MAX_SINKS ? 0 : err_set("too many event subscribers");
    if (!rc) {
        b->sinks[b->n_sinks].fn = sink;
        b->sinks[b->n_sinks++].ctx = ctx;
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void ev_unsubscribe(ev_bus *b, ev_sink sink, void *ctx)
{
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->n_sinks; i++)
        if (b->sinks[i].fn == sink && b->sinks[i].ctx == ctx) {
            b->sinks[i] = b->sinks[--b->n_sinks];
            break;
        }
    pthread_mutex_unlock(&b->lock);
}

int ev_is(const json_t *ev, const char *type)
{
    const char *t = json_string_value(json_object_get(ev, "ev"));
    return t && !strcmp(t, type);
}

double ev_now(const ev_bus *b) { return ev_clock() - b->start; }

void ev_emit(ev_bus *b, int conv, const char *type, json_t *fields)
{
    if (!b) {
        json_decref(fields);
        return;
    }
    json_t *ev = json_pack("{s:s, s:i, s:f}", "ev", type, "conv", conv, "t", ev_now(b));
    if (ev && fields)
        json_object_update(ev, fields);
    json_decref(fields);
    if (!ev)
        return;
    const char *why = b->check ? ev_check(ev, EV_BIG, EV_BIG, 1) : NULL;
    if (why) { /* a program error, not an input's: the test that made it fails at the emitter */
        fprintf(stderr, "kvchat: an emitted event breaks model/event_schema.h: %s\n", why);
        abort();
    }
    pthread_mutex_lock(&b->lock);
    for (int i = 0; i < b->n_sinks; i++)
        b->sinks[i].fn(b->sinks[i].ctx, ev);
    pthread_mutex_unlock(&b->lock);
    json_decref(ev);
}
