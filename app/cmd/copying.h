/* kvchat perplexity --repeat and --recall: whether a model copies from far back (copying.c). */
#ifndef KVCHAT_COPYING_H
#define KVCHAT_COPYING_H

#include "../chat/runtime.h"

/* what --repeat measured: the drop in loss at the second reading, its 95% interval, the gate
 * (--recall: the points the fact adds to the fill's top-1 accuracy, with it: `with`; chats) */
typedef struct {
    double drop, ci[2], with;
    int passages, holds;
} copy_figures;

/* Passages of ids[0..n) read again after the text that follows them (at most max_passages; -1:
 * all the text holds): prints the drop in loss with its interval and the gate's verdict, and
 * keeps them in *out (NULL: not kept). */
int copy_repeat(loaded_model *lm, const int *ids, int n, int max_passages, int quiet,
                copy_figures *out);
/* The recall chats of path (JSON lines with "turns", "answer" and "fill"): prints the fill's
 * top-1 accuracy with the fact and without it, their intervals and the gate's verdict, and keeps
 * them in *out (NULL: not kept). */
int copy_recall(loaded_model *lm, const char *path, int quiet, copy_figures *out);

#endif
