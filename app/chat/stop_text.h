/* A reply's text as it streams, held back where it may be the start of the template's stop text
 * (DialoGPT-style templates end a reply with a marker such as "\nUser:" that is not a token of its
 * own). Nothing shown is ever taken back: a piece that might begin the stop text waits until the
 * next token settles it. */
#ifndef KVCHAT_STOP_TEXT_H
#define KVCHAT_STOP_TEXT_H

#include <stddef.h>

typedef struct {
    const char *stop; /* the stop text, or NULL: nothing is held back */
    char *buf;        /* the reply so far, NUL-terminated once anything is added */
    size_t len, cap;
    int *tok_end; /* [n_tok] the text's length after each token */
    int n_tok;
    size_t cap_tok;
    size_t shown; /* how much of buf stop_ready has handed out */
} stop_text;

void stop_init(stop_text *s, const char *stop);
void stop_free(stop_text *s);
/* Adds one token's text. Returns 0; 1 when the reply now holds the stop text, and then the reply
 * is cut back to the last token that ends before it, and *drop is how many of the tokens added
 * must be taken back (the one the stop text starts in, and those after it); -1 with the error
 * when out of memory. */
int stop_push(stop_text *s, const char *piece, size_t n, int *drop);
/* Adds the text the tokenizer still held at the reply's end (no more tokens: nothing held back). */
int stop_finish(stop_text *s, const char *rest, size_t n);
/* The text that may be shown now and was not yet: *n bytes (0: none). final: the reply ended
 * (after a stop or stop_finish), so nothing is held back. */
const char *stop_ready(stop_text *s, int final, size_t *n);
/* The whole reply, handed to the caller (free it); "" when nothing was added. NULL when out of
 * memory. */
char *stop_take(stop_text *s);

#endif
