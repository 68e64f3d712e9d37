/* Making room in a conversation's window: which turns go is model/window.c's rule (the one the
 * panel previews); this applies it to the window, its turns and its cache, and emits the evict
 * event. An exact eviction can be prepared ahead, in the background while the user types
 * (evict_prepare). */
#ifndef KVCHAT_EVICTION_H
#define KVCHAT_EVICTION_H

#include <stdatomic.h>

#include "../../model/window.h"
#include "runtime.h"

typedef enum { EVICT_EXACT, EVICT_SHIFT } evict_mode;

typedef struct {
    int window;        /* tokens the cache holds at most */
    int target;        /* drop at least this many per eviction */
    evict_mode mode;   /* exact: re-prefill what moved; shift: move cached rows (approximate) */
    win_when when;     /* at a turn's start, for its reply too; or when a token does not fit */
    win_policy policy; /* which turns go first: the oldest, or the least read */
} evict_rule;

struct conv;

/* Room for n more tokens in c's window, and for `reply` more after them (a turn's start: its
 * reply's room, win_reply_room; 0 inside a reply), evicting when it lacks it (model/window.c's
 * win_turn_need); open_last: the last turn is a reply in progress (it stays). 0, or -1 with the
 * error (the kept prefix and pinned turns fill the window). It swaps in the eviction c has
 * prepared when that is the one the rule gives now. */
int evict_make_room(struct conv *c, loaded_model *lm, const evict_rule *r, int n, int reply,
                    int open_last);

/* Between turns: when the next turn may not fit (a message as long as the longest in the window
 * and n_predict: at --evict-at turn, what its start makes room for), makes the first eviction it
 * would need, on a background fork of c's cache that shares the kept prefix and takes only memory
 * the pool can spare; then, at --evict-at turn, the eviction a longer message would need (one more
 * turn dropped), in chunks, kept as far as it got when the message comes. Gives way within one
 * layer when *stop is set. Emits prepare (tokens, ms, ready; longer for the second). 0, or -1 on
 * a failure to allocate (the plan is then simply not there). */
int evict_prepare(struct conv *c, loaded_model *lm, const evict_rule *r, int n_predict,
                  const atomic_int *stop);
/* At a reply's start, at --evict-at turn, when the reply may run into the window (its turn could
 * not make room for all of -n): the eviction it would make then, prepared as it streams. It forks
 * the cache at the first position that eviction drops, and after each reply token (evict_follow)
 * recomputes one more chunk of what survives and of the reply so far, at its new position, as the
 * eviction recomputes them without a plan: the reply goes on in the old window and the eviction
 * swaps in with less than a chunk to make, the same bits either way. It takes only memory the pool
 * can spare beside the reply's growth to the window, else it is dropped. */
void evict_follow_begin(struct conv *c, const evict_rule *r, int n_predict);
void evict_follow(struct conv *c, loaded_model *lm, const evict_rule *r);
/* at the reply's end: a plan that followed it was for its window alone */
void evict_follow_end(struct conv *c);
/* Drops c's prepared eviction, if any, and the memory it holds. */
void evict_discard(struct conv *c);

#endif
