#include "lines.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/err.h"

/* the line in buf[start..end), cut out and NUL-terminated */
static int take(line_reader *r, size_t end, size_t skip, char **line)
{
    r->buf[end] = 0;
    *line = r->buf + r->start;
    r->start = end + skip;
    return LINES_LINE;
}

int lines_next(line_reader *r, volatile sig_atomic_t *stop, char **line)
{
    *line = NULL;
    if (r->start == r->len)
        r->start = r->len = 0;
    for (;;) {
        char *nl = r->len > r->start ? memchr(r->buf + r->start, '\n', r->len - r->start) : NULL;
        if (nl)
            return take(r, (size_t)(nl - r->buf), 1, line);
        if (r->eof)
            return r->len > r->start ? take(r, r->len, 0, line) : LINES_END;
        if (*stop)
            return LINES_STOPPED;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int ready = poll(&p, 1, 100); /* a tenth of a second: how soon a stop is seen */
        if (ready < 0 && errno != EINTR)
            return err_set("reading the input: %s", strerror(errno)), LINES_ERROR;
        if (ready <= 0)
            continue;
        if (r->start) { /* the returned lines' room back, before growing */
            memmove(r->buf, r->buf + r->start, r->len - r->start);
            r->len -= r->start;
            r->start = 0;
        }
        if (r->len - r->start > LINES_MAX)
            return err_set("an input line longer than %d MiB", LINES_MAX >> 20), LINES_ERROR;
        if (r->cap - r->len < 4096 + 1 &&
            err_grow(&r->buf, &r->cap, r->len + 4096 + 1, 1, "the input line"))
            return LINES_ERROR;
        ssize_t got = read(STDIN_FILENO, r->buf + r->len, r->cap - r->len - 1);
        if (got < 0 && errno != EINTR && errno != EAGAIN)
            return err_set("reading the input: %s", strerror(errno)), LINES_ERROR;
        r->eof = got == 0;
        r->len += got > 0 ? (size_t)got : 0;
    }
}

void lines_free(line_reader *r)
{
    free(r->buf);
    *r = (line_reader){0};
}
