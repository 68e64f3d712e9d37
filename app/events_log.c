#include "events_log.h"

#include <errno.h>
#include <string.h>

#include "../kernels/err.h"

static void write_event(void *ctx, json_t *ev)
{
    events_log *l = ctx;
    if (l->err)
        return;
    errno = 0;
    if (json_dumpf(ev, l->f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) || fputc('\n', l->f) == EOF ||
        fflush(l->f))
        l->err = errno ? errno : EIO;
}

int events_log_open(events_log *l, const char *path, ev_bus *bus)
{
    memset(l, 0, sizeof *l);
    if (!(l->f = fopen(path, "w")))
        return err_set("--events %s: %s", path, strerror(errno));
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
