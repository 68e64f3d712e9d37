/* A message typed over several lines, as ollama takes one: a line that starts with """ opens it,
 * and the line that ends with """ closes it; the lines between keep their breaks. The full-screen
 * chat and the line mode both feed their entered lines through it. */
#ifndef KVCHAT_BLOCK_H
#define KVCHAT_BLOCK_H

#include <stddef.h>

typedef struct {
    char *buf; /* the message so far */
    size_t len, cap;
    int open, lines; /* inside a block; the lines it holds */
} msg_block;

enum { BLOCK_LINE, BLOCK_MORE, BLOCK_DONE };
/* An entered line: BLOCK_LINE when it is a message (or a command) by itself, *msg NULL; BLOCK_MORE
 * when an open block took it; BLOCK_DONE when it closed one: *msg is the whole message (the
 * caller's to free). -1 with the error when out of memory (the block is dropped). */
int block_feed(msg_block *b, const char *line, char **msg);
void block_free(msg_block *b);

#endif
