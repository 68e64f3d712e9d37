/* The context window of a conversation as turns of tokens, and the one rule for what an eviction
 * drops. The chat engine evicts by it; the cache panel previews the next eviction by it. */
#ifndef KVCHAT_WINDOW_H
#define KVCHAT_WINDOW_H

/* who wrote a turn, or a chat pane's message (a notice is never in a window) */
enum { ROLE_PREAMBLE, ROLE_USER, ROLE_ASSISTANT, ROLE_NOTICE };

/* read: the turn's share of where the replies read, decayed (WIN_LEAST_READ's; 0 otherwise);
 * took: the reply in progress's reading of it so far, folded into read at its end; no: its number
 * in the conversation, from 1, which evictions leave as it is (events name turns by it) */
typedef struct {
    int start, len, role, pinned;
    float read, took;
    int no;
} win_turn;

/* Which whole turns an eviction takes first: the oldest (--evict exact), or those the replies read
 * least (--evict least-read), by each turn's decayed share of attention. Two more for kvchat bench
 * --policy's comparisons, not chat options: WIN_LAST_READ, those the last reply read least (no
 * decay: TOVA's rule at a turn's grain), and WIN_RANKED, by ranks the caller puts in each turn's
 * read (engine_rank: the random control and the oracle). Each orders by read, lowest first. */
typedef enum { WIN_OLDEST, WIN_LEAST_READ, WIN_LAST_READ, WIN_RANKED } win_policy;
/* whether a policy goes by the replies' reading (attention must be on) */
int win_reads(win_policy p);

/* Marks in drop[0..n) what an eviction removes from a window of n tokens: whole unpinned turns,
 * the oldest first or the least read first (ties: the oldest), never the kept prefix, the
 * preamble or a pinned turn, until `target` tokens; a last turn still in progress (open_last) only
 * loses its oldest part, as much as still lacks to reach `target`. Returns the number dropped, or
 * -1 (with drop cleared) when fewer than `need` can go. Either way a larger need drops a superset.
 */
int win_plan(const win_turn *turns, int n_turns, int n, int keep, int need, int target,
             int open_last, win_policy policy, unsigned char *drop);
/* A reply's end at a policy that reads: each turn's read decays (by WIN_READ_DECAY at
 * WIN_LEAST_READ, to nothing at WIN_LAST_READ) and takes the mean share the reply's `steps` decode
 * steps gave it. The decay halves a share each reply: what the
 * next replies read is best foretold by the last few, and a turn read long ago but no longer
 * loses its claim within a few turns (a sum without decay, as H2O keeps, favours old turns for
 * having been read for longer). */
#define WIN_READ_DECAY 0.5f
void win_fold_reading(win_turn *turns, int n_turns, int steps, win_policy policy);
/* The most tokens an eviction may drop from that window, by the same rule: all but the kept prefix,
 * the preamble and the pinned turns. */
int win_evictable(const win_turn *turns, int n_turns, int n, int keep);

/* When an eviction comes. WIN_AT_TURN (--evict-at turn, the default) makes a turn's room before
 * its message is prefilled: the message and the longest reply (-n), so that no eviction falls
 * inside a reply (it drops history up to a reply's length sooner). WIN_AT_FULL evicts only when
 * the next token does not fit: at a message, or inside a reply. */
typedef enum { WIN_AT_FULL, WIN_AT_TURN } win_when;

/* The room a turn's start makes for its reply beyond the message: -n at WIN_AT_TURN, else 0 */
int win_reply_room(win_when when, int n_predict);
/* The longest message in the window (its user turn's tokens), 0 before the first */
int win_longest_message(const win_turn *turns, int n_turns);
/* The tokens a turn's start must drop from a window of n of `window` tokens to take a message of
 * `message` tokens: <= 0 for none. With a reply's room (WIN_AT_TURN), room for the reply too and
 * for a message as long as the longest in the window, so that what goes depends on the window
 * alone, not on a message no longer than those before it: the eviction made while the user types
 * is then the one the message finds. Short of the room to drop that (the kept prefix and the
 * pinned turns), the message's own size; short of that, the message alone. */
int win_turn_need(const win_turn *turns, int n_turns, int n, int keep, int window, int message,
                  int reply_room);
/* The reply's room win_turn_need makes room for: reply_room, or 0 when it falls back to the message
 * alone (the kept prefix and the pinned turns leave no room for a reply: it evicts as it grows) */
int win_reply_kept(const win_turn *turns, int n_turns, int n, int keep, int window, int message,
                   int reply_room);

#endif
