/* bench --policy's first figures on every track: whether the model copies from far back and
 * recalls what an early turn stated (kvchat perplexity --repeat and --recall, whose gates
 * assets/models/README.md defines). A rule can lose only what the model would have read: where a
 * gate fails, or was not measured, the tracks rank no rule ("no difference measured"). */
#ifndef KVCHAT_POLICY_GATES_H
#define KVCHAT_POLICY_GATES_H

#include <jansson.h>

#include "../chat/runtime.h"
#include "../cmd/copying.h"

typedef struct {
    copy_figures repeat, recall;
    int repeat_measured, recall_measured;
    int holds; /* both measured, both held */
} policy_gates;

/* Measures and prints both on the held-out text (--repeat, 100 passages) and recall chats; either
 * path NULL takes tests/train/corpus.py's file of that kind beside `near` (heldout-austen.txt,
 * heldout-recall.jsonl; NULL: none). A file that is not there leaves its gate unmeasured; one
 * that is there but cannot be read is an error. Adds "model_gates" to doc. */
int policy_gates_run(loaded_model *lm, const char *text, const char *recall, const char *near,
                     policy_gates *g, json_t *doc);
/* a rule against the default by the interval of their paired difference (bs_paired): `below` or
 * `above` where every gate holds (hold) and the interval leaves out zero, else "no difference
 * measured" */
const char *policy_rank(const double diff[2], int hold, const char *below, const char *above);
/* the line beside a comparison: "" where the gates hold, else why nothing is ranked */
const char *policy_gates_verdict(const policy_gates *g);

#endif
