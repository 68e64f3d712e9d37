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

#endif
