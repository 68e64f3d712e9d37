#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../files.h"
#include "fingerprint.h"
#include "../chat/records.h"

#ifndef KVCHAT_VERSION
#define KVCHAT_VERSION "0.1.0"
#endif

const char *session_model_name(const loaded_model *lm)
{
    const char *name = strrchr(lm->dir, '/');
    return name && name[1] ? name + 1 : lm->dir;
}

int session_settings_of(session_settings *s, const loaded_model *lm, const engine_opts *eo)
{
    const kv_opts *ko = kv_pool_opts(lm->pool);
    const draft_opts *d = &eo->draft;
    memset(s, 0, sizeof *s);
    s->weights_dtype = dt_name(lm->model.wtype);
    s->cache = (ev_cacheset){.layout = ko->layout == KV_PAGED ? "paged" : "contiguous",
                             .dtype = dt_name(ko->type),
                             .block_tokens = ko->block_tokens,
                             .window = ko->window,
                             EV_OPT(grow_factor, (double)ko->grow_factor),
                             EV_OPT(prealloc, ko->prealloc),
                             EV_OPT(pool_bytes, (long long)ko->pool_bytes)};
    s->chat = (ev_chatset){.template = tpl_name(eo->tpl),
                           .keep = eo->keep,
                           .evict_min = eo->evict_min,
                           .evict = eo->evict == EVICT_SHIFT       ? "shift"
                                    : eo->policy == WIN_LEAST_READ ? "least-read"
                                                                   : "exact",
                           EV_OPT(evict_at, eo->evict_at == WIN_AT_TURN ? "turn" : "full"),
                           .fidelity = eo->fidelity,
                           EV_OPT(system, eo->system ? eo->system : "")};
    /* speculative decoding's drafter: only when on, so a session without one reads as before */
    if (d->kind == DRAFT_NONE)
        return 0;
    s->chat.draft = draft_name(d);
    s->chat.has_draft = s->chat.has_draft_max = s->chat.has_draft_p_min = 1;
    s->chat.draft_max = d->max;
    s->chat.draft_p_min = d->min_prob;
    /* a draft model's own fingerprint: a changed drafter is told from a divergence */
    if (d->kind == DRAFT_MODEL) {
        if (fp_model(d->dir, s->draft_fp))
            return -1;
        s->chat.draft_fingerprint = s->draft_fp;
        s->chat.has_draft_fingerprint = 1;
    }
    return 0;
}

json_t *session_header(const loaded_model *lm, const model_opts *mo, const engine_opts *eo)
{
    char fpm[17] = "", fpt[17] = "", when[32], dir[PATH_MAX];
    if (fp_model(lm->dir, fpm) || fp_tokenizer(lm->dir, fpt))
        return NULL;
    if (!realpath(lm->dir, dir)) /* absolute, so --resume and --verify work from any directory */
        snprintf(dir, sizeof dir, "%s", lm->dir);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *h = json_pack(
        "{s:i, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:i, s:b}, s:s}", "kvchat_session", SESSION_FORMAT,
        "kvchat", KVCHAT_VERSION, "created", when, "model", "name", session_model_name(lm), "dir",
        dir, "fingerprint", fpm, "tokenizer", fpt, "vocab_size", lm->model.cfg.vocab_size,
        "random_weights", lm->model.cfg.random_weights, "backend", lm->backend->name);
    ev_sampling sampling = rec_sampling(&mo->sp, mo->n_predict);
    session_settings set;
    if (!h || session_settings_of(&set, lm, eo) ||
        json_object_set_new(h, "weights_dtype", json_string(set.weights_dtype)) ||
        json_object_set_new(h, "sampling", ev_sampling_json(&sampling)) ||
        json_object_set_new(h, "cache", ev_cacheset_json(&set.cache)) ||
        json_object_set_new(h, "chat", ev_chatset_json(&set.chat))) {
        json_decref(h);
        h = NULL;
    }
    return h;
}

static int write_line(FILE *f, const json_t *j)
{
    return json_dumpf(j, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) ||
                   fputc('\n', f) == EOF
               ? -1
               : 0;
}

static void sink(void *ctx, json_t *ev)
{
    session_writer *w = ctx;
    if (w->failed)
        return;
    if (write_line(w->f, ev)) {
        w->failed = 1;
        return;
    }
    /* a finished turn is on disk before the next prompt */
    if (ev_kind_of(ev) == EVK_TURN_END && (fflush(w->f) || fsync(fileno(w->f))))
        w->failed = 1;
}

/* A write cut by a crash leaves a last line without its newline; appending after it would make that
 * line, and so the file, unreadable. A cut line that is still a whole JSON value only lost its
 * newline; anything else goes to PATH.damaged and the file is cut back to its last complete line.
 */
static int repair_tail(int fd, const char *path, off_t size)
{
    enum { CHUNK = 1 << 16 };
    char *buf = malloc(CHUNK);
    if (!buf)
        return err_set("--session %s: out of memory", path);
    off_t end = size, nl = -1;
    while (end > 0 && nl < 0) { /* the last newline, reading backwards */
        off_t from = end > CHUNK ? end - CHUNK : 0;
        ssize_t got = pread(fd, buf, (size_t)(end - from), from);
        if (got != end - from) {
            free(buf);
            return err_set("--session %s: cannot read: %s", path,
                           got < 0 ? strerror(errno) : "short read");
        }
        for (off_t i = got - 1; i >= 0 && nl < 0; i--)
            if (buf[i] == '\n')
                nl = from + i;
        end = from;
    }
    free(buf);
    size_t cut = (size_t)(size - (nl + 1));
    if (!cut)
        return 0;
    char *tail = cut <= SESSION_MAX_LINE ? malloc(cut) : NULL;
    if (!tail || pread(fd, tail, cut, nl + 1) != (ssize_t)cut) {
        free(tail);
        return err_set("--session %s: cannot read its last line", path);
    }
    json_t *j = json_loadb(tail, cut, JSON_ALLOW_NUL, NULL);
    int whole = json_is_object(j), rc = 0;
    json_decref(j);
    if (whole) {
        rc = pwrite(fd, "\n", 1, size) == 1
                 ? 0
                 : err_set("--session %s: cannot write: %s", path, strerror(errno));
    } else {
        char damaged[4200];
        snprintf(damaged, sizeof damaged, "%s.damaged", path);
        part_file out;
        rc = part_open(&out, damaged);
        if (!rc) {
            fwrite(tail, 1, cut, out.f);
            rc = part_commit(&out, 1);
        }
        if (!rc && (ftruncate(fd, nl + 1) || fsync(fd)))
            rc = err_set("--session %s: cannot cut its damaged last line: %s", path,
                         strerror(errno));
        if (!rc)
            fprintf(stderr,
                    "kvchat: %s ended in a line cut by a crash (%zu bytes, kept in %s); appending "
                    "after the "
                    "last complete line\n",
                    path, cut, damaged);
    }
    free(tail);
    return rc;
}

int session_open(session_writer *w, const char *path, session_mode mode, const json_t *header,
                 ev_bus *bus)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    if (make_parent_dirs(path))
        return err_wrap("--session %s", path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat sb;
    if (fd < 0)
        return err_set("--session %s: %s", path, strerror(errno));
    const char *why =
        fstat(fd, &sb) ? strerror(errno)
        : !S_ISREG(sb.st_mode)
            ? "not a regular file (a session is a file that is appended to and synced)"
        : flock(fd, LOCK_EX | LOCK_NB)
            ? errno == EWOULDBLOCK ? "another kvchat is writing to it" : strerror(errno)
        : mode == SESSION_NEW && sb.st_size > 0
            ? "already exists (a new session never replaces a file)"
            : NULL;
    int appending =
        !why && mode == SESSION_APPEND && sb.st_size > 0; /* else a new session: the header first */
    if (appending && repair_tail(fd, path, sb.st_size)) {
        close(fd);
        return -1;
    }
    if (!why && !appending && ftruncate(fd, 0))
        why = strerror(errno);
    if (why || !(w->f = fdopen(fd, "a"))) {
        err_set("--session %s: %s", path, why ? why : strerror(errno));
        close(fd);
        return -1;
    }
    if (!appending && (write_line(w->f, header) || fflush(w->f) || fsync(fileno(w->f)))) {
        err_set("--session %s: cannot write the header: %s", path, strerror(errno ? errno : EIO));
        fclose(w->f);
        w->f = NULL;
        return -1;
    }
    return ev_subscribe(bus, sink, w);
}

void session_close(session_writer *w, ev_bus *bus)
{
    if (!w->f)
        return;
    ev_unsubscribe(bus, sink, w);
    fflush(w->f);
    fsync(fileno(w->f));
    fclose(w->f);
    w->f = NULL;
}

long long session_tell(session_writer *w)
{
    struct stat sb;
    if (!w->f || fflush(w->f) || fstat(fileno(w->f), &sb))
        return -1;
    return (long long)sb.st_size;
}

int session_cut(session_writer *w, long long at)
{
    if (!w->f || at < 0)
        return 0;
    if (fflush(w->f) || ftruncate(fileno(w->f), (off_t)at) || fsync(fileno(w->f)))
        return err_set("--session %s: cannot cut back a failed resume's events: %s", w->path,
                       strerror(errno));
    return 0;
}

int session_dir(char *buf, size_t n)
{
    return xdg_path(buf, n, "XDG_DATA_HOME", ".local/share", "sessions",
                    "pass --session FILE or --no-save");
}

int session_default_path(char *buf, size_t n)
{
    char name[64];
    time_t now = time(NULL);
    strftime(name, sizeof name, "/%Y-%m-%d-%H%M%S.jsonl", localtime(&now));
    if (session_dir(buf, n))
        return -1;
    size_t len = strlen(buf);
    return len + strlen(name) >= n ? err_set("%.64s...: path too long", buf)
                                   : (memcpy(buf + len, name, strlen(name) + 1), 0);
}

int session_write_file(const char *path, const json_t *header, json_t *const *events, int n)
{
    part_file out;
    if (part_open(&out, path))
        return -1;
    int rc = write_line(out.f, header);
    for (int i = 0; i < n && !rc; i++)
        rc = write_line(out.f, events[i]);
    if (part_commit(&out, !rc))
        return rc ? err_set("%s: cannot write", path) : -1;
    return 0;
}

void session_emit_model(loaded_model *lm)
{
    const gpt2_config *c = &lm->model.cfg;
    size_t free_b = 0, total = 0;
    lm->backend->mem_info(lm->backend, &free_b, &total);
    long long params = (long long)gpt2_param_count(c);
    ev_emit_model(lm->bus, 0,
                  &(ev_model){EV_OPT(name, session_model_name(lm)),
                              EV_OPT(backend, lm->backend->name), EV_OPT(params, params),
                              EV_OPT(weights_bytes, (long long)gpt2_weights_bytes(&lm->model)),
                              EV_OPT(pool_bytes, (long long)kv_pool_opts(lm->pool)->pool_bytes),
                              EV_OPT(workspace_bytes, (long long)gpt2_workspace_bytes(c, c->n_ctx)),
                              EV_OPT(n_ctx, c->n_ctx), EV_OPT(random_weights, c->random_weights),
                              EV_OPT(weights_dtype, dt_name(lm->model.wtype)),
                              EV_OPT(memory_total_bytes, (long long)total)});
}
