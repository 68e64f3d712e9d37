/* Reading a session file. It may come from anyone: every line is checked (size, JSON, known event,
 * the types and ranges model/event_schema.h declares) before anything trusts it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "session.h"

static int is_int(const json_t *j, json_int_t lo, json_int_t hi)
{
    return json_is_integer(j) && json_integer_value(j) >= lo && json_integer_value(j) <= hi;
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
    if (ev_check_sampling(json_object_get(h, "sampling")))
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
        json_t *j = end > pos ? json_loadb(buf + pos, end - pos,
                                           JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je)
                              : NULL;
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
            /* a reader takes fields the schema does not declare (a newer kvchat's) */
            const char *why = ev_check(j, s->window, s->vocab, 0);
            if (why) {
                err_set("%s: line %d: %s", name, s->lines, why);
                json_decref(j);
                session_free(s);
                return -1;
            }
            if (ev_kind_of(j) == EVK_RESUME) { /* a resumed run may use a larger window, or --force
                                          another model */
                s->window = ev_resume_window(j) > s->window ? ev_resume_window(j) : s->window;
                s->vocab = ev_resume_vocab_size(j) > s->vocab ? ev_resume_vocab_size(j) : s->vocab;
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
