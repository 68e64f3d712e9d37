/* Making room in a conversation's window: which turns go is model/window.c's rule (the one the panel
 * previews); this applies it to the window, its turns and its cache, and emits the evict event. */
#ifndef KVCHAT_EVICTION_H
#define KVCHAT_EVICTION_H

#include "runtime.h"

typedef enum { EVICT_EXACT, EVICT_SHIFT } evict_mode;

typedef struct {
    int window;       /* tokens the cache holds at most */
    int target;       /* drop at least this many per eviction */
    evict_mode mode;  /* exact: re-prefill what moved; shift: move cached rows (approximate) */
} evict_rule;

struct conv;

/* Room for n more tokens in c's window, evicting when it lacks it; open_last: the last turn is a reply
 * in progress (it stays). 0, or -1 with the error (the kept prefix and pinned turns fill the window). */
int evict_make_room(struct conv *c, loaded_model *lm, const evict_rule *r, int n, int open_last);

#endif
