#include "events_log.h"

#include <errno.h>
#include <string.h>

#include "../kernels/err.h"

static void write_event(void *ctx, json_t *ev)
{
    events_log *l = ctx;
    if (json_dumpf(ev, l->f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) == 0)
        fputc('\n', l->f);
    fflush(l->f);
}

int events_log_open(events_log *l, const char *path, ev_bus *bus)
{
    if (!(l->f = fopen(path, "w")))
        return err_set("--events %s: %s", path, strerror(errno));
    return ev_subscribe(bus, write_event, l);
}

void events_log_close(events_log *l)
{
    if (l->f)
        fclose(l->f);
    l->f = NULL;
}
