#include "events.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
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

/* Nanoseconds the process spent stopped (Ctrl-Z, SIGTSTP), and when the current stop began. While
 * a stop is open the clock stands at its start: after SIGCONT every thread runs on at once, and one
 * that ends a token before the handler has continued the clock must not count the stop. Set from a
 * signal handler, so lock-free: a sequence count, odd while a writer is at work, lets a reader take
 * the two values of one state (the writer never waits for a reader). */
static atomic_llong stopped_ns, stop_began_ns;
static atomic_uint clock_seq;

static long long mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

double ev_clock(void)
{
    long long now, began, stopped;
    unsigned seq;
    do {
        seq = atomic_load(&clock_seq);
        now = mono_ns();
        began = atomic_load(&stop_began_ns);
        stopped = atomic_load(&stopped_ns);
    } while ((seq & 1) || seq != atomic_load(&clock_seq));
    return (double)((began ? began : now) - stopped) * 1e-9;
}

void ev_clock_stop(void)
{
    atomic_fetch_add(&clock_seq, 1);
    atomic_store(&stop_began_ns, mono_ns());
    atomic_fetch_add(&clock_seq, 1);
}

void ev_clock_continue(void)
{
    atomic_fetch_add(&clock_seq, 1);
    long long began = atomic_exchange(&stop_began_ns, 0);
    if (began)
        atomic_fetch_add(&stopped_ns, mono_ns() - began);
    atomic_fetch_add(&clock_seq, 1);
}

void ev_clock_stop_process(void)
{
    ev_clock_stop();
    raise(SIGSTOP);
    ev_clock_continue();
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

double ev_now(const ev_bus *b) { return ev_clock() - b->start; }

/* Where each field lies in its event's struct: the schema's rows with offsets, in its order, so
 * that one loop writes every event. */
typedef struct {
    const char *ev, *name;
    char type, opt;
    size_t at, has, n; /* the value's offset, its has_ flag's and its length's (NONE: none) */
} member;
#define NONE ((size_t)-1)
enum {
    INT,
    I64,
    NUM,
    STR,
    BOOL,
    IDS,
    INTS,
    NUMS,
    SPANS,
    TURNS,
    SAMPLING,
    CACHE,
    CACHESET,
    CHATSET,
    OBJ
};
#define HAS_REQ(s, f) NONE
#define HAS_OPT(s, f) offsetof(s, has_##f)
#define LEN_INT(s, f) NONE
#define LEN_I64(s, f) NONE
#define LEN_NUM(s, f) NONE
#define LEN_STR(s, f) offsetof(s, f##_len)
#define LEN_BOOL(s, f) NONE
#define LEN_IDS(s, f) offsetof(s, n_##f)
#define LEN_INTS(s, f) offsetof(s, n_##f)
#define LEN_NUMS(s, f) offsetof(s, n_##f)
#define LEN_SPANS(s, f) offsetof(s, n_##f)
#define LEN_TURNS(s, f) offsetof(s, n_##f)
#define LEN_SAMPLING(s, f) NONE
#define LEN_CACHE(s, f) NONE
#define LEN_CACHESET(s, f) NONE
#define LEN_CHATSET(s, f) NONE
#define LEN_OBJ(s, f) NONE
#define ROW_OF(s, e, f, type, need) \
    {#e, #f, type, HAS_##need(s, f) != NONE, offsetof(s, f), HAS_##need(s, f), LEN_##type(s, f)},
#define EVENT_ROW(e, f, type, lo, hi, need, doc) ROW_OF(struct ev_##e, e, f, type, need)
#define SAMPLING_ROW(e, f, type, lo, hi, need, doc) ROW_OF(ev_sampling, e, f, type, need)
#define CACHE_ROW(e, f, type, lo, hi, need, doc) ROW_OF(ev_cache, e, f, type, need)
static const member ROWS[] = {EV_SCHEMA(EV_SKIP_EVENT, EVENT_ROW)};
static const member SAMPLING_ROWS[] = {EV_SAMPLING_FIELDS(SAMPLING_ROW, sampling)};
static const member CACHE_ROWS[] = {EV_CACHE_FIELDS(CACHE_ROW, cache)};
#define CACHESET_ROW(e, f, type, lo, hi, need, doc) ROW_OF(ev_cacheset, e, f, type, need)
#define CHATSET_ROW(e, f, type, lo, hi, need, doc) ROW_OF(ev_chatset, e, f, type, need)
static const member CACHESET_ROWS[] = {EV_CACHESET_FIELDS(CACHESET_ROW, cacheset)};
static const member CHATSET_ROWS[] = {EV_CHATSET_FIELDS(CHATSET_ROW, chatset)};
#define COUNT(a) (int)(sizeof a / sizeof *a)

static json_t *ints(const int *v, int n, int per)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        json_t *x = per == 1 ? json_integer(v[i]) : json_pack("[i, i]", v[2 * i], v[2 * i + 1]);
        if (json_array_append_new(a, x))
            json_decref(a), a = NULL;
    }
    return a;
}

static json_t *object_of(const void *s, const member *rows, int n);

/* one field's JSON, from the struct s */
static json_t *value(const char *s, const member *m)
{
    const void *p = s + m->at;
    int n = m->n != NONE ? *(const int *)(s + m->n) : 0;
    switch (m->type) {
        case INT: return json_integer(*(const int *)p);
        case I64: return json_integer(*(const long long *)p);
        case NUM: return json_real(*(const double *)p);
        case BOOL: return json_boolean(*(const int *)p);
        case STR: {
            const char *t = *(const char *const *)p ? *(const char *const *)p : "";
            size_t len = *(const size_t *)(s + m->n);
            return json_stringn(t, len ? len : strlen(t));
        }
        case IDS:
        case INTS: return ints(*(const int *const *)p, n, 1);
        case SPANS: return ints(*(const int *const *)p, n, 2);
        case NUMS: {
            const double *v = *(const double *const *)p;
            json_t *a = json_array();
            for (int i = 0; a && i < n; i++)
                if (json_array_append_new(a, json_real(v[i])))
                    json_decref(a), a = NULL;
            return a;
        }
        case TURNS: {
            const win_turn *t = *(const win_turn *const *)p;
            json_t *a = json_array();
            for (int i = 0; a && i < n; i++)
                if (json_array_append_new(
                        a, json_pack("[i, i, i, b]", t[i].start, t[i].len, t[i].role, t[i].pinned)))
                    json_decref(a), a = NULL;
            return a;
        }
        case SAMPLING: return ev_sampling_json(p);
        case CACHE: return ev_cache_json(p);
        case CACHESET: return ev_cacheset_json(p);
        case CHATSET: return ev_chatset_json(p);
        case OBJ: return json_incref(*(json_t *const *)p);
    }
    return NULL;
}

/* struct s's fields, as rows (those of event ev, or all) declare them, set in o: 0, or -1 */
static int fill(json_t *o, const void *s, const member *rows, int n, const char *ev)
{
    for (int i = 0; i < n; i++) {
        const member *m = &rows[i];
        if ((ev && strcmp(m->ev, ev)) || (m->opt && !*(const int *)((const char *)s + m->has)))
            continue;
        json_t *v = value(s, m);
        if (!v || json_object_set_new(o, m->name, v))
            return -1;
    }
    return 0;
}

static json_t *object_of(const void *s, const member *rows, int n)
{
    json_t *o = json_object();
    if (o && fill(o, s, rows, n, NULL))
        json_decref(o), o = NULL;
    return o;
}

json_t *ev_sampling_json(const ev_sampling *s)
{
    return object_of(s, SAMPLING_ROWS, COUNT(SAMPLING_ROWS));
}

json_t *ev_cache_json(const ev_cache *c) { return object_of(c, CACHE_ROWS, COUNT(CACHE_ROWS)); }

json_t *ev_cacheset_json(const ev_cacheset *c)
{
    return object_of(c, CACHESET_ROWS, COUNT(CACHESET_ROWS));
}

json_t *ev_chatset_json(const ev_chatset *c)
{
    return object_of(c, CHATSET_ROWS, COUNT(CHATSET_ROWS));
}

static void emit(ev_bus *b, int conv, ev_kind kind, const void *fields)
{
    if (!b)
        return;
    const char *type = ev_kind_name(kind);
    json_t *ev = json_pack("{s:s, s:i, s:f}", "ev", type, "conv", conv, "t", ev_now(b));
    if (!ev || fill(ev, fields, ROWS, COUNT(ROWS), type)) {
        json_decref(ev);
        return;
    }
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

#define EMITTER(NAME, name, doc) \
    void ev_emit_##name(ev_bus *b, int conv, const ev_##name *ev) { emit(b, conv, EVK_##NAME, ev); }
EV_SCHEMA(EMITTER, EV_SKIP_FIELD)
