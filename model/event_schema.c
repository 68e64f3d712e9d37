/* What event_schema.h declares, as the names, the checks and the table. */
#include "event_schema.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

typedef enum {
    T_INT,
    T_I64,
    T_NUM,
    T_STR,
    T_BOOL,
    T_IDS,
    T_NUMS,
    T_INTS,
    T_SPANS,
    T_TURNS,
    T_SAMPLING,
    T_CACHE,
    T_CACHESET,
    T_CHATSET,
    T_OBJ
} ftype;
enum { OPT, REQ };

typedef struct {
    const char *ev, *name;
    ftype type;
    int need;
    const char *doc;
} field;

#define FIELD_ROW(e, f, type, lo, hi, need, doc) {#e, #f, T_##type, need, doc},
#define EVENT_ROW(NAME, name, doc) {#name, doc},
static const field FIELDS[] = {EV_SCHEMA(EV_SKIP_EVENT, FIELD_ROW)};
static const field SAMPLING[] = {EV_SAMPLING_FIELDS(FIELD_ROW, sampling)};
static const field CACHE[] = {EV_CACHE_FIELDS(FIELD_ROW, cache)};
static const field CACHESET[] = {EV_CACHESET_FIELDS(FIELD_ROW, cacheset)};
static const field CHATSET[] = {EV_CHATSET_FIELDS(FIELD_ROW, chatset)};
static const struct {
    const char *name, *doc;
} EVENTS[] = {EV_SCHEMA(EVENT_ROW, EV_SKIP_FIELD)};
enum {
    N_FIELDS = sizeof FIELDS / sizeof *FIELDS,
    N_SAMPLING = sizeof SAMPLING / sizeof *SAMPLING,
    N_CACHE = sizeof CACHE / sizeof *CACHE,
    N_CACHESET = sizeof CACHESET / sizeof *CACHESET,
    N_CHATSET = sizeof CHATSET / sizeof *CHATSET
};

/* Each bound is linear in W and V, so its values at (W, V) = (0, 0), (1, 0) and (0, 1) give it at
 * any W and V: the schema's expressions are evaluated three times, by three meanings of W and V. */
#define LO_OF(e, f, type, lo, hi, need, doc) (double)(lo),
#define HI_OF(e, f, type, lo, hi, need, doc) (double)(hi),
#define W 0.0
#define V 0.0
static const double LO_0[] = {EV_SCHEMA(EV_SKIP_EVENT, LO_OF)};
static const double HI_0[] = {EV_SCHEMA(EV_SKIP_EVENT, HI_OF)};
#undef W
#define W 1.0
static const double LO_W[] = {EV_SCHEMA(EV_SKIP_EVENT, LO_OF)};
static const double HI_W[] = {EV_SCHEMA(EV_SKIP_EVENT, HI_OF)};
#undef W
#undef V
#define W 0.0
#define V 1.0
static const double LO_V[] = {EV_SCHEMA(EV_SKIP_EVENT, LO_OF)};
static const double HI_V[] = {EV_SCHEMA(EV_SKIP_EVENT, HI_OF)};
#undef W
#undef V
static const double SAMPLING_LO[] = {EV_SAMPLING_FIELDS(LO_OF, sampling)};
static const double SAMPLING_HI[] = {EV_SAMPLING_FIELDS(HI_OF, sampling)};
static const double CACHE_LO[] = {EV_CACHE_FIELDS(LO_OF, cache)};
static const double CACHE_HI[] = {EV_CACHE_FIELDS(HI_OF, cache)};
static const double CACHESET_LO[] = {EV_CACHESET_FIELDS(LO_OF, cacheset)};
static const double CACHESET_HI[] = {EV_CACHESET_FIELDS(HI_OF, cacheset)};
static const double CHATSET_LO[] = {EV_CHATSET_FIELDS(LO_OF, chatset)};
static const double CHATSET_HI[] = {EV_CHATSET_FIELDS(HI_OF, chatset)};

ev_kind ev_kind_of(const json_t *ev)
{
    const char *type = ev_type(ev);
    for (int k = 0; type && k < EVK_COUNT; k++)
        if (!strcmp(EVENTS[k].name, type))
            return (ev_kind)k;
    return EVK_NONE;
}

const char *ev_kind_name(ev_kind k) { return k >= 0 && k < EVK_COUNT ? EVENTS[k].name : NULL; }

static double at(const double *b0, const double *bw, const double *bv, int i, double W, double V)
{
    return b0[i] + (bw[i] - b0[i]) * W + (bv[i] - b0[i]) * V;
}

static _Thread_local char why_buf[512];

static const char *why(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why_buf, sizeof why_buf, fmt, ap);
    va_end(ap);
    return why_buf;
}

static int is_int(const json_t *j, double lo, double hi)
{
    return json_is_integer(j) && (double)json_integer_value(j) >= lo &&
           (double)json_integer_value(j) <= hi;
}

/* compared as the floats they were written from: 0.01 is written as 0.00999999978 */
static int is_num(const json_t *j, double lo, double hi)
{
    return json_is_number(j) && isfinite(json_number_value(j)) &&
           (float)json_number_value(j) >= (float)lo && (float)json_number_value(j) <= (float)hi;
}

/* an array of at most max values, each of which is(v, lo, hi) */
static int array_of(const json_t *a, double max, double lo, double hi,
                    int (*is)(const json_t *, double, double))
{
    if (!json_is_array(a) || (double)json_array_size(a) > max)
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!is(json_array_get(a, i), lo, hi))
            return 0;
    return 1;
}

static int spans_ok(const json_t *a, double W)
{
    if (!json_is_array(a))
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *x = json_array_get(a, i);
        if (!array_of(x, 2, 0, W, is_int) || json_array_size(x) != 2 ||
            json_integer_value(json_array_get(x, 0)) + json_integer_value(json_array_get(x, 1)) > W)
            return 0;
    }
    return 1;
}

static int turn_ok(const json_t *x)
{
    return json_is_array(x) && json_array_size(x) == 4 && is_int(json_array_get(x, 0), 0, EV_BIG) &&
           is_int(json_array_get(x, 1), 0, EV_BIG) && is_int(json_array_get(x, 2), 0, 2) &&
           json_is_boolean(json_array_get(x, 3));
}

static int turns_ok(const json_t *a)
{
    if (!json_is_array(a))
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!turn_ok(json_array_get(a, i)))
            return 0;
    return 1;
}

/* what a field of type t must be, when j is not that; NULL when it is */
static const char *type_why(const json_t *j, ftype t, double lo, double hi, double W, double V)
{
    static _Thread_local char buf[256];
    switch (t) {
        case T_INT:
            if (is_int(j, lo, hi))
                return NULL;
            snprintf(buf, sizeof buf, "an integer in %.0f..%.0f", lo, hi);
            return buf;
        case T_I64: return json_is_integer(j) ? NULL : "an integer";
        case T_NUM:
            if (is_num(j, lo, hi))
                return NULL;
            snprintf(buf, sizeof buf, "a number in %g..%g", lo, hi);
            return buf;
        case T_STR: return json_is_string(j) ? NULL : "a string";
        case T_BOOL: return json_is_boolean(j) ? NULL : "true or false";
        case T_IDS:
            if (array_of(j, W, 0, V - 1, is_int))
                return NULL;
            snprintf(buf, sizeof buf, "token ids (at most %.0f, each in 0..%.0f)", W, V - 1);
            return buf;
        case T_NUMS:
            if (array_of(j, W + 1, lo, hi, is_num))
                return NULL;
            snprintf(buf, sizeof buf, "numbers in %g..%g (at most %.0f)", lo, hi, W + 1);
            return buf;
        case T_INTS:
            if (array_of(j, W + 1, lo, hi, is_int))
                return NULL;
            snprintf(buf, sizeof buf, "integers in %.0f..%.0f (at most %.0f)", lo, hi, W + 1);
            return buf;
        case T_SPANS:
            if (spans_ok(j, W))
                return NULL;
            snprintf(buf, sizeof buf, "[start, length] pairs within the window (%.0f)", W);
            return buf;
        case T_TURNS: return turns_ok(j) ? NULL : "[start, length, role, pinned] lists";
        case T_SAMPLING: return ev_check_sampling(j) ? "sampling settings in range" : NULL;
        case T_CACHE: return ev_check_cache(j) ? "the cache's totals" : NULL;
        case T_CACHESET: return ev_check_cacheset(j) ? "the cache's settings" : NULL;
        case T_CHATSET: return ev_check_chatset(j) ? "the chat's settings" : NULL;
        case T_OBJ: return json_is_object(j) ? NULL : "an object";
    }
    return "of a type this program does not know";
}

/* a block of the fields rows[0..n) declare, with bounds lo[i]..hi[i] (no W or V in them) */
static const char *check_block(const json_t *block, const field *rows, int n, const double *lo,
                               const double *hi)
{
    if (!json_is_object(block))
        return "it must be an object";
    for (int i = 0; i < n; i++) {
        const json_t *j = json_object_get(block, rows[i].name);
        const char *w =
            j || rows[i].need == REQ ? type_why(j, rows[i].type, lo[i], hi[i], 0, 0) : NULL;
        if (w)
            return why("'%s' must be %s", rows[i].name, w);
    }
    return NULL;
}

const char *ev_check_sampling(const json_t *block)
{
    return check_block(block, SAMPLING, N_SAMPLING, SAMPLING_LO, SAMPLING_HI);
}

const char *ev_check_cache(const json_t *block)
{
    return check_block(block, CACHE, N_CACHE, CACHE_LO, CACHE_HI);
}

const char *ev_check_cacheset(const json_t *block)
{
    return check_block(block, CACHESET, N_CACHESET, CACHESET_LO, CACHESET_HI);
}

const char *ev_check_chatset(const json_t *block)
{
    return check_block(block, CHATSET, N_CHATSET, CHATSET_LO, CHATSET_HI);
}

static int declared(const char *type, const char *key)
{
    if (!strcmp(key, "ev") || !strcmp(key, "conv") || !strcmp(key, "t"))
        return 1;
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(FIELDS[i].ev, type) && !strcmp(FIELDS[i].name, key))
            return 1;
    return 0;
}

/* what ties a prefill's fields together: its new tokens after the cached ones fit the window, and
 * its preamble is some of them */
static const char *prefill_fits(const json_t *ev, double W)
{
    double n = (double)json_array_size(ev_prefill_ids(ev));
    if ((double)ev_prefill_cached(ev) + n > W)
        return why("prefill needs 'ids' within the window: %.0f cached and %.0f new are more than "
                   "%.0f",
                   (double)ev_prefill_cached(ev), n, W);
    if ((double)ev_prefill_preamble(ev) > n)
        return why("prefill needs 'preamble' to be at most its %.0f ids", n);
    return NULL;
}

/* a turn_end's turns lie within its window, and it closes a conversation's turn */
static const char *turns_fit(const json_t *ev)
{
    if (ev_conv(ev) < 1)
        return "turn_end needs 'conv' to be a conversation's (1 or more)";
    const json_t *t = ev_turn_end_turns(ev);
    json_int_t n = (json_int_t)json_array_size(ev_turn_end_window(ev));
    for (size_t i = 0; i < json_array_size(t); i++) {
        const json_t *x = json_array_get(t, i);
        json_int_t start = json_integer_value(json_array_get(x, 0));
        if (start > n || json_integer_value(json_array_get(x, 1)) > n - start)
            return "turn_end turns must be [start, length, role, pinned] within its window";
    }
    return NULL;
}

/* an attention event has a mean and a max for each of its spans */
static const char *attention_fits(const json_t *ev)
{
    size_t n = json_array_size(ev_attention_spans(ev));
    if (json_array_size(ev_attention_mean(ev)) != n || json_array_size(ev_attention_max(ev)) != n)
        return "attention needs a 'mean' and a 'max' for each of its spans";
    return NULL;
}

const char *ev_check(const json_t *ev, long long W_, long long V_, int strict)
{
    const char *type = ev_type(ev);
    if (!json_is_object(ev) || !type)
        return "not an event object";
    ev_kind e = ev_kind_of(ev);
    if (e == EVK_NONE)
        return why("unknown event '%.40s'", type);
    const json_t *t = json_object_get(ev, "t");
    if (!is_int(json_object_get(ev, "conv"), 0, EV_CONV_MAX) || !is_num(t, 0, EV_INF))
        return why("events need an integer 'conv' and a time 't' ('%s')", type);
    double W = (double)W_, V = (double)V_;
    for (int i = 0; i < N_FIELDS; i++) {
        if (strcmp(FIELDS[i].ev, type))
            continue;
        const json_t *j = json_object_get(ev, FIELDS[i].name);
        if (!j && FIELDS[i].need == OPT)
            continue;
        const char *w = type_why(j, FIELDS[i].type, at(LO_0, LO_W, LO_V, i, W, V),
                                 at(HI_0, HI_W, HI_V, i, W, V), W, V);
        if (w)
            return why("%s needs '%s' to be %s", type, FIELDS[i].name, w);
    }
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)ev, key, value)
    {
        if (!strict)
            break;
        if (!declared(type, key))
            return why("%s has '%s', which model/event_schema.h does not declare", type, key);
    }
    switch ((ev_kind)e) {
        case EVK_PREFILL: return prefill_fits(ev, W);
        case EVK_TURN_END: return turns_fit(ev);
        case EVK_ATTENTION: return attention_fits(ev);
        case EVK_VERIFY:
            return ev_verify_accepted(ev) > ev_verify_drafted(ev)
                       ? why("verify needs 'accepted' at most 'drafted'")
                       : NULL;
        default: return NULL;
    }
}

static void print_fields(FILE *f, const field *rows, int n, const char *type)
{
    int any = 0;
    for (int i = 0; i < n; i++)
        if (!type || !strcmp(rows[i].ev, type)) {
            fprintf(f, "%s`%s`%s: %s", any ? "; " : "", rows[i].name,
                    rows[i].need == REQ ? "" : "?", rows[i].doc);
            any = 1;
        }
    if (!any)
        fprintf(f, "-");
}

void ev_print_table(FILE *f)
{
    fprintf(f, "| ev | what | fields (`?`: may be absent) |\n|----|------|--------|\n");
    for (size_t e = 0; e < sizeof EVENTS / sizeof *EVENTS; e++) {
        fprintf(f, "| `%s` | %s | ", EVENTS[e].name, EVENTS[e].doc);
        print_fields(f, FIELDS, N_FIELDS, EVENTS[e].name);
        fprintf(f, " |\n");
    }
    fprintf(f, "| (sampling) | a `turn_end`'s `sampling`, the header's | ");
    print_fields(f, SAMPLING, N_SAMPLING, NULL);
    fprintf(f, " |\n| (cache) | the `cache` of an event that changed the cache | ");
    print_fields(f, CACHE, N_CACHE, NULL);
    fprintf(f, " |\n| (cache settings) | the header's `cache`, a `resume`'s | ");
    print_fields(f, CACHESET, N_CACHESET, NULL);
    fprintf(f, " |\n| (chat settings) | the header's `chat`, a `resume`'s | ");
    print_fields(f, CHATSET, N_CHATSET, NULL);
    fprintf(f, " |\n");
}
