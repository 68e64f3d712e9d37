/* The context window of a conversation as turns of tokens, and the one rule for what an eviction
 * drops. The chat engine evicts by it; the cache panel previews the next eviction by it. */
#ifndef KVCHAT_WINDOW_H
#define KVCHAT_WINDOW_H

/* who wrote a turn, or a chat pane's message (a notice is never in a window) */
enum { ROLE_PREAMBLE, ROLE_USER, ROLE_ASSISTANT, ROLE_NOTICE };

typedef struct {
    int start, len, role, pinned;
} win_turn;

/* Marks in drop[0..n) what an eviction removes from a window of n tokens: whole unpinned turns from
 * the oldest (never the kept prefix, the preamble or a pinned turn) until `target` tokens; a last
 * turn still in progress (open_last) only loses its oldest part, as much as still lacks to reach
 * `target`. Returns the number dropped, or -1 (with drop cleared) when fewer than `need` can go. */
int win_plan(const win_turn *turns, int n_turns, int n, int keep, int need, int target,
             int open_last, unsigned char *drop);
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

#endif
