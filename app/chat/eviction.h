/* Making room in a conversation's window: which turns go is model/window.c's rule (the one the
 * panel previews); this applies it to the window, its turns and its cache, and emits the evict
 * event. An exact eviction can be prepared ahead, in the background while the user types
 * (evict_prepare). */
#ifndef KVCHAT_EVICTION_H
#define KVCHAT_EVICTION_H

#include <stdatomic.h>

#include "runtime.h"

typedef enum { EVICT_EXACT, EVICT_SHIFT } evict_mode;

typedef struct {
    int window;      /* tokens the cache holds at most */
    int target;      /* drop at least this many per eviction */
    evict_mode mode; /* exact: re-prefill what moved; shift: move cached rows (approximate) */
} evict_rule;

struct conv;

/* Room for n more tokens in c's window, evicting when it lacks it; open_last: the last turn is a
 * reply in progress (it stays). 0, or -1 with the error (the kept prefix and pinned turns fill the
 * window). It swaps in the eviction c has prepared when that is the one the rule gives now. */
int evict_make_room(struct conv *c, loaded_model *lm, const evict_rule *r, int n, int open_last);

/* Between turns: when the next turn may not fit (the window's free room is less than the next
 * message's expected size plus n_predict), makes the first eviction it would need, on a background
 * fork of c's cache that shares the kept prefix and takes only memory the pool can spare. Gives way
 * within one layer when *stop is set. Emits prepare (tokens, ms, ready). 0, or -1 on a failure to
 * allocate (the plan is then simply not there). */
int evict_prepare(struct conv *c, loaded_model *lm, const evict_rule *r, int n_predict,
                  const atomic_int *stop);
/* Drops c's prepared eviction, if any, and the memory it holds. */
void evict_discard(struct conv *c);

#endif
