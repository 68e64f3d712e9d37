#include "events_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kernels/err.h"

static void write_event(void *ctx, json_t *ev)
{
    events_log *l = ctx;
    if (l->err)
        return;
    errno = 0;
    if (json_dumpf(ev, l->f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) ||
        fputc('\n', l->f) == EOF || fflush(l->f))
        l->err = errno ? errno : EIO;
}

/* whether the regular file at fd begins as a session file does (its header's first key) */
static int holds_session(int fd)
{
    static const char magic[] = "{\"kvchat_session\"";
    char head[sizeof magic - 1];
    return pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
           !memcmp(head, magic, sizeof head);
}

int events_log_open(events_log *l, const char *path, int force, ev_bus *bus)
{
    memset(l, 0, sizeof *l);
    /* not truncated on open: what is there is looked at first */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EACCES) /* a device or a pipe that is write-only to us */
        fd = open(path, O_WRONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        err_set("--events %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *why = NULL;
    if (!S_ISREG(sb.st_mode))
        ; /* a device or a FIFO is written as it is */
    else if (sb.st_size > 0 && holds_session(fd))
        why = "holds a session, which an event log never replaces";
    else if (flock(fd, LOCK_EX | LOCK_NB))
        why = errno == EWOULDBLOCK ? "another kvchat is writing to it; choose another file"
                                   : strerror(errno);
    else if (sb.st_size > 0 && !force)
        why = "already exists; choose another file, or --force to replace it";
    else if (ftruncate(fd, 0))
        why = strerror(errno);
    if (why || !(l->f = fdopen(fd, "w"))) {
        err_set("--events %s: %s", path, why ? why : strerror(errno));
        close(fd);
        return -1;
    }
    l->bus = bus;
    return ev_subscribe(bus, write_event, l);
}

int events_log_close(events_log *l)
{
    if (!l->f)
        return 0;
    if (l->bus)
        ev_unsubscribe(l->bus, write_event, l);
    if (fclose(l->f) && !l->err)
        l->err = errno ? errno : EIO;
    l->f = NULL;
    return l->err;
}
