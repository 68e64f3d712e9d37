/* Line mode's input: lines read from fd 0 by poll and read, not stdio, so that a flag set by a
 * signal handler (Ctrl-C) ends a wait for input whichever thread the signal was delivered to. */
#ifndef KVCHAT_LINES_H
#define KVCHAT_LINES_H

#include <signal.h>
#include <stddef.h>

typedef struct {
    char *buf;
    size_t len, cap, start; /* buf[start..len) is read and not yet returned */
    int eof;
} line_reader;

enum { LINES_LINE, LINES_END, LINES_STOPPED, LINES_ERROR };
/* longer than any message the engine takes: the input is not a chat */
#define LINES_MAX (16 << 20)

/* Waits for the next line of fd 0, which *line then holds (no newline; valid until the next call):
 * LINES_LINE; LINES_END at the end of the input (a last line without its newline comes first);
 * LINES_STOPPED when *stop is set meanwhile; LINES_ERROR (out of memory, a read error) with the
 * error set. */
int lines_next(line_reader *r, volatile sig_atomic_t *stop, char **line);
void lines_free(line_reader *r);

#endif
