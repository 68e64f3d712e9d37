#include "block.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"

#define QUOTES "\"\"\""

void block_free(msg_block *b)
{
    free(b->buf);
    b->buf = NULL;
    b->len = b->cap = 0;
    b->open = 0;
}

static int add(msg_block *b, const char *s, size_t n)
{
    if (err_append(&b->buf, &b->len, &b->cap, s, n, "a multi-line message")) {
        block_free(b);
        return -1;
    }
    return 0;
}

int block_feed(msg_block *b, const char *line, char **msg)
{
    *msg = NULL;
    size_t n = strlen(line);
    int opens = !b->open && !strncmp(line, QUOTES, 3);
    if (!b->open && !opens)
        return BLOCK_LINE;
    if (opens) { /* the rest of the line is its first, when there is any */
        line += 3;
        n -= 3;
        b->len = 0;
        b->lines = 0;
        b->open = 1;
        if (add(b, "", 0))
            return -1;
    }
    int closes = n >= 3 && !strcmp(line + n - 3, QUOTES);
    size_t text = closes ? n - 3 : n;
    if (text || (!closes && !opens)) { /* a line of it (an empty one too), or what precedes """ */
        if ((b->lines && add(b, "\n", 1)) || add(b, line, text))
            return -1;
        b->lines++;
    }
    if (!closes)
        return BLOCK_MORE;
    *msg = b->buf;
    b->buf = NULL;
    b->len = b->cap = 0;
    b->open = 0;
    return BLOCK_DONE;
}
