/* kvchat perplexity's files: the base run --save-logits writes and --kl-divergence reads (each
 * scored token's id, top id, loss and f16 log-probabilities), and the claim every output makes on
 * its path before anything is measured. */
#ifndef KVCHAT_LOGITS_FILE_H
#define KVCHAT_LOGITS_FILE_H

#include <stdint.h>
#include <stdio.h>

/* A base run being read: V log-probabilities a row, count rows */
typedef struct {
    FILE *f;
    int V;
    long count, read;
    uint16_t *row;
} base_run;

/* Opens path as a base run of vocabulary V; a one-line error naming what is wrong with it. */
int base_open(base_run *b, const char *path, int V);
/* The next row into lp (V floats), checked to score token id and to hold finite numbers; *lse
 * makes the row a distribution again (f16's rounding leaves it off by about 1e-3), *top its top
 * id, *nll its loss. */
int base_next(base_run *b, int id, float *lp, double *lse, int32_t *top, float *nll,
              const char *path);
void base_close(base_run *b);

/* A base run's header (vocabulary V, count rows), then each row: lp the scored token's
 * log-softmax (V floats), row scratch of V halves. 0, or -1 on a failed write. */
int save_head(FILE *f, int V, long count);
int save_row(FILE *f, int id, int top, const float *lp, int V, uint16_t *row);

/* Before an output (opt names it: "--save-logits", "--json") is written to path: refused when it
 * is one of the inputs (NULL-ended), or an existing regular file whose first bytes are not `head`
 * (an earlier output of the same kind) unless force. */
int output_claim(const char *path, const char *opt, const char *head, const char *const *inputs,
                 int force);
/* the first bytes of an output of each kind */
extern const char LOGITS_HEAD[8], JSON_HEAD[];

#endif
