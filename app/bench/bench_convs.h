/* The conversations kvchat bench --policy runs: one chat whose replies the model draws (--messages
 * FILE, one message a line, or a built-in one), or held-out conversations whose replies are given
 * and teacher-forced (--chats FILE, --recall FILE: one JSON object a line, as
 * tests/train/corpus.py writes them). */
#ifndef KVCHAT_BENCH_CONVS_H
#define KVCHAT_BENCH_CONVS_H

#include <stddef.h>

#include "../../model/tokenizer.h"

typedef struct {
    char **msgs;    /* the user's messages */
    char **replies; /* the reply to each; NULL throughout for a chat whose replies are drawn */
    int n;
    int recall; /* the last reply is the answer to a question about an early turn */
    char *fill; /* --recall's "fill": the part of the answer only the early turn gives */
} bench_conv;

/* At most one of messages, chats, recall set (none: the built-in chat). 0, or -1 with an error
 * naming the file and the line. */
int bench_convs_read(const char *messages, const char *chats, const char *recall, bench_conv **out,
                     int *n);
void bench_convs_free(bench_conv *c, int n);
/* A recall chat's answer as n tokens, its text after `lead` bytes (the space a template writes
 * before a reply): is_fill[k] = whether token k holds part of the fill (its bytes overlap the
 * fill's), which scores an answer by what only the early turn gives. Returns how many do. */
int bench_conv_fill(const tokenizer *tok, const bench_conv *c, const int *answer, int n,
                    size_t lead, unsigned char *is_fill);
/* the Debian packages and versions a held-out file came from, when corpus.py's corpus.json is
 * beside it (a line on stdout; nothing otherwise) */
void bench_print_sources(const char *path);

#endif
