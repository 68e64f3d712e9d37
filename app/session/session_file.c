/* Reading a session file. It may come from anyone: every line is checked (size, JSON, known event,
 * the types and ranges of the fields this program uses) before anything trusts it. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "session.h"

static const char *const KNOWN[] = {EV_TYPES};

static int is_int(const json_t *j, json_int_t lo, json_int_t hi)
{
    return json_is_integer(j) && json_integer_value(j) >= lo && json_integer_value(j) <= hi;
}

static int int_array(const json_t *a, size_t max, json_int_t lo, json_int_t hi)
{
    if (!json_is_array(a) || json_array_size(a) > max)
        return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!is_int(json_array_get(a, i), lo, hi))
            return 0;
    return 1;
}

/* compared as the floats they were written from: 0.01 is written as 0.00999999978 */
static int is_num(const json_t *j, float lo, float hi)
{
    return json_is_number(j) && (float)json_number_value(j) >= lo &&
           (float)json_number_value(j) <= hi;
}

/* optional fields: absent, or in range */
static int absent_or_int(const json_t *ev, const char *key, json_int_t lo, json_int_t hi)
{
    const json_t *j = json_object_get(ev, key);
    return !j || is_int(j, lo, hi);
}

/* sampling settings, as the command line accepts them (header, set and turn_end alike) */
static int sampling_ok(const json_t *sp)
{
    return json_is_object(sp) && is_num(json_object_get(sp, "temp"), 0, 100) &&
           is_int(json_object_get(sp, "top_k"), 0, 1 << 24) &&
           is_num(json_object_get(sp, "top_p"), 0, 1) &&
           is_num(json_object_get(sp, "repeat_penalty"), 0.01, 100) &&
           json_is_integer(json_object_get(sp, "seed")) &&
           absent_or_int(sp, "n_predict", 0, 1 << 20);
}

/* the fields this program reads, with their types and ranges; "" when fine. Positions are bounded
 * by the session's window W and token ids by its vocabulary V: nothing this program wrote exceeds
 * them, and the panel sizes its arrays by them. */
static const char *check_event(const json_t *ev, const char *type, json_int_t W, json_int_t V)
{
    if (!strcmp(type, EV_PREFILL)) {
        const json_t *ids = json_object_get(ev, "ids");
        json_int_t cached = json_integer_value(json_object_get(ev, "cached")),
                   n = (json_int_t)json_array_size(ids);
        return int_array(ids, (size_t)W, 0, V - 1) && is_int(json_object_get(ev, "cached"), 0, W) &&
                       cached + n <= W && absent_or_int(ev, "preamble", 0, n)
                   ? ""
                   : "prefill needs 'ids' (token ids), 'cached' and 'preamble' within the window";
    }
    if (!strcmp(type, EV_TOKEN))
        return is_int(json_object_get(ev, "id"), 0, V - 1) &&
                       (!json_object_get(ev, "text") || json_is_string(json_object_get(ev, "text")))
                   ? ""
                   : "token needs an 'id' in the vocabulary";
    if (!strcmp(type, EV_STATS))
        return absent_or_int(ev, "window", 1, W) && absent_or_int(ev, "tokens", 0, W) &&
                       absent_or_int(ev, "keep", 0, W) && absent_or_int(ev, "evict_min", 0, 65536)
                   ? ""
                   : "stats has a window, tokens, keep or evict_min out of range";
    if (!strcmp(type, EV_SET))
        return sampling_ok(ev) ? "" : "set needs sampling settings in range";
    if (!strcmp(type, EV_FORK))
        return absent_or_int(ev, "parent", 1, SESSION_MAX_CONV)
                   ? ""
                   : "fork needs a conversation 'parent'";
    if (!strcmp(type, EV_RESUME))
        return absent_or_int(ev, "window", 1, 65536) &&
                       absent_or_int(ev, "vocab_size", 257, 1 << 24)
                   ? ""
                   : "resume has a window or vocab_size out of range";
    if (!strcmp(type, EV_PIN))
        return is_int(json_object_get(ev, "turn"), 0, 1 << 20) ? "" : "pin needs a 'turn'";
    if (!strcmp(type, EV_USER) || !strcmp(type, EV_SYSTEM))
        return json_is_string(json_object_get(ev, "text"))
                   ? ""
                   : "user and system events need a string 'text'";
    if (!strcmp(type, EV_EVICT)) {
        const json_t *r = json_object_get(ev, "ranges");
        if (!json_is_array(r))
            return "evict needs 'ranges'";
        for (size_t i = 0; i < json_array_size(r); i++) {
            const json_t *x = json_array_get(r, i);
            if (!int_array(x, 2, 0, W) || json_array_size(x) != 2 ||
                json_integer_value(json_array_get(x, 0)) +
                        json_integer_value(json_array_get(x, 1)) >
                    W)
                return "evict ranges must be [start, length] pairs within the window";
        }
        return "";
    }
    if (!strcmp(type, EV_TRUNCATE))
        return is_int(json_object_get(ev, "to"), 0, W) && absent_or_int(ev, "from", 0, W)
                   ? ""
                   : "truncate needs 'to' within the window";
    if (!strcmp(type, EV_TURN_END)) {
        const json_t *t = json_object_get(ev, "turns"), *w = json_object_get(ev, "window");
        json_int_t n = (json_int_t)json_array_size(w);
        if (!is_int(json_object_get(ev, "conv"), 1, SESSION_MAX_CONV) ||
            !int_array(w, (size_t)W, 0, V - 1) || !json_is_array(t) ||
            !is_int(json_object_get(ev, "keep"), 0, W) ||
            !json_is_string(json_object_get(ev, "rng")) ||
            !json_is_string(json_object_get(ev, "reply")) ||
            !is_int(json_object_get(ev, "tokens"), 0, 1 << 20))
            return "turn_end needs a conversation, 'window' (token ids within the window), "
                   "'turns', 'keep', 'rng', 'reply' and 'tokens'";
        if (!sampling_ok(json_object_get(ev, "sampling")))
            return "turn_end needs sampling settings in range";
        for (size_t i = 0; i < json_array_size(t); i++) {
            const json_t *x = json_array_get(t, i);
            if (!json_is_array(x) || json_array_size(x) != 4 ||
                !is_int(json_array_get(x, 0), 0, n) ||
                !is_int(json_array_get(x, 1), 0, n - json_integer_value(json_array_get(x, 0))) ||
                !is_int(json_array_get(x, 2), 0, 2) || !json_is_boolean(json_array_get(x, 3)))
                return "turn_end turns must be [start, length, role, pinned] within its window";
        }
        return "";
    }
    return "";
}

static int add_event(session *s, json_t *ev)
{
    if (err_grow(&s->events, &s->cap, (size_t)s->n_events + 1, sizeof *s->events,
                 "a session's events"))
        return -1;
    s->events[s->n_events++] = ev;
    return 0;
}

static int parse_header(session *s, json_t *h, const char *name)
{
    const json_t *v = json_object_get(h, "kvchat_session");
    if (!json_is_object(h) || !json_is_integer(v))
        return err_set("%s: not a kvchat session (the first line is not a session header)", name);
    if (json_integer_value(v) > SESSION_FORMAT)
        return err_set(
            "%s: written by a newer kvchat (session format %lld); this one reads up to format %d",
            name, (long long)json_integer_value(v), SESSION_FORMAT);
    if (json_integer_value(v) < 1)
        return err_set("%s: session format %lld is not valid", name,
                       (long long)json_integer_value(v));
    if (!json_is_object(json_object_get(h, "model")) ||
        !json_is_object(json_object_get(h, "sampling")) ||
        !json_is_object(json_object_get(h, "cache")) || !json_is_object(json_object_get(h, "chat")))
        return err_set("%s: the header lacks its model, sampling, cache or chat settings", name);
    const json_t *w = json_object_get(json_object_get(h, "cache"), "window"),
                 *vs = json_object_get(json_object_get(h, "model"), "vocab_size");
    if (!is_int(w, 1, 65536) || !is_int(vs, 257, 1 << 24))
        return err_set("%s: the header's cache window (1..65536) or vocabulary size "
                       "(257..16777216) is missing or out of range",
                       name);
    if (!sampling_ok(json_object_get(h, "sampling")))
        return err_set("%s: the header's sampling settings are missing or out of range", name);
    s->window = (int)json_integer_value(w);
    s->vocab = (int)json_integer_value(vs);
    s->header = h;
    return 0;
}

int session_parse(session *s, const char *buf, size_t len, const char *name)
{
    memset(s, 0, sizeof *s);
    if (!len)
        return err_set("%s: empty file, not a session", name);
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        s->lines++;
        int line = s->lines;
        if (end - pos > SESSION_MAX_LINE) {
            session_free(s);
            return err_set("%s: line %d is longer than %u MiB", name, line, SESSION_MAX_LINE >> 20);
        }
        json_error_t je;
        json_t *j =
            end > pos ? json_loadb(buf + pos, end - pos, JSON_REJECT_DUPLICATES, &je) : NULL;
        if (!j) {
            if (!nl && s->header &&
                end > pos) { /* the last line, cut by a crash: keep what came before */
                s->truncated = 1;
                break;
            }
            if (end == pos && !nl)
                break;
            session_free(s);
            return err_set("%s: line %d is not valid JSON%s", name, line,
                           end == pos ? " (empty line)" : "");
        }
        if (!s->header) {
            if (parse_header(s, j, name)) {
                json_decref(j);
                session_free(s);
                return -1;
            }
        } else {
            const char *type = json_string_value(json_object_get(j, "ev")), *why = NULL;
            size_t k = 0;
            for (; type && k < sizeof KNOWN / sizeof KNOWN[0]; k++)
                if (!strcmp(type, KNOWN[k]))
                    break;
            if (!json_is_object(j) || !type)
                why = "not an event object";
            else if (k == sizeof KNOWN / sizeof KNOWN[0])
                why = "unknown event";
            else if (!is_int(json_object_get(j, "conv"), 0, SESSION_MAX_CONV) ||
                     !json_is_number(json_object_get(j, "t")) ||
                     !isfinite(json_number_value(json_object_get(j, "t"))) ||
                     json_number_value(json_object_get(j, "t")) < 0)
                why = "events need an integer 'conv' and a time 't'";
            else if (*(why = check_event(j, type, s->window, s->vocab)) == 0)
                why = NULL;
            if (why) {
                err_set("%s: line %d: %s%s%.40s%s", name, s->lines, why, type ? " '" : "",
                        type ? type : "", type ? "'" : "");
                json_decref(j);
                session_free(s);
                return -1;
            }
            if (!strcmp(type, EV_RESUME)) { /* a resumed run may use a larger window, or --force
                                               another model */
                const json_t *w = json_object_get(j, "window"),
                             *v = json_object_get(j, "vocab_size");
                s->window =
                    w && json_integer_value(w) > s->window ? (int)json_integer_value(w) : s->window;
                s->vocab =
                    v && json_integer_value(v) > s->vocab ? (int)json_integer_value(v) : s->vocab;
            }
            if (add_event(s, j)) {
                json_decref(j);
                session_free(s);
                return err_wrap("%s: line %d", name, line);
            }
        }
        pos = end + 1;
    }
    if (!s->header) {
        session_free(s);
        return err_set("%s: no session header", name);
    }
    return 0;
}

int session_read(session *s, const char *path)
{
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set("%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set("%s: not a regular file", path);
    }
    if ((unsigned long long)sb.st_size > (1ull << 32)) {
        close(fd);
        return err_set("%s: %lld bytes is larger than a session can be (4 GiB)", path,
                       (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size, got = 0;
    char *buf = err_malloc(len + 1, "a session file");
    if (!buf) {
        close(fd);
        return err_wrap("%s", path);
    }
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    int rc = session_parse(s, buf, got, path);
    free(buf);
    return rc;
}

void session_free(session *s)
{
    json_decref(s->header);
    for (int i = 0; i < s->n_events; i++)
        json_decref(s->events[i]);
    free(s->events);
    memset(s, 0, sizeof *s);
}
