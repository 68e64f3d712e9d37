#include "window.h"

#include <string.h>

static int fixed(const win_turn *turns, int n_turns, int keep, int i)
{
    if (i < keep)
        return 1;
    for (int t = 0; t < n_turns; t++)
        if (i >= turns[t].start && i < turns[t].start + turns[t].len)
            return turns[t].pinned || turns[t].role == ROLE_PREAMBLE;
    return 0;
}

int win_reads(win_policy p) { return p == WIN_LEAST_READ || p == WIN_LAST_READ; }

int win_evictable(const win_turn *turns, int n_turns, int n, int keep)
{
    int most = 0;
    for (int i = 0; i < n; i++)
        most += !fixed(turns, n_turns, keep, i);
    return most;
}

int win_reply_room(win_when when, int n_predict)
{
    return when == WIN_AT_TURN && n_predict > 0 ? n_predict : 0;
}

int win_longest_message(const win_turn *turns, int n_turns)
{
    int most = 0;
    for (int t = 0; t < n_turns; t++)
        if (turns[t].role == ROLE_USER && turns[t].len > most)
            most = turns[t].len;
    return most;
}

/* the message size a turn's start makes room beside, with the reply's: the longest in the window,
 * else this one, or -1 when evicting cannot make that room */
static int room_beside(const win_turn *turns, int n_turns, int n, int keep, int window, int message,
                       int reply_room)
{
    if (reply_room <= 0)
        return -1;
    int longest = win_longest_message(turns, n_turns), can = -1;
    int sizes[2] = {longest > message ? longest : message, message};
    for (int k = 0; k < 2; k++) {
        int over = n + sizes[k] + reply_room - window;
        if (over <= 0)
            return sizes[k];
        can = can < 0 ? win_evictable(turns, n_turns, n, keep) : can;
        if (can >= over)
            return sizes[k];
    }
    return -1;
}

int win_turn_need(const win_turn *turns, int n_turns, int n, int keep, int window, int message,
                  int reply_room)
{
    int size = room_beside(turns, n_turns, n, keep, window, message, reply_room);
    return size >= 0 ? n + size + reply_room - window : n + message - window;
}

int win_reply_kept(const win_turn *turns, int n_turns, int n, int keep, int window, int message,
                   int reply_room)
{
    return room_beside(turns, n_turns, n, keep, window, message, reply_room) >= 0 ? reply_room : 0;
}

/* whether turn t may go whole, and is not marked yet */
static int whole_candidate(const win_turn *turns, int t, int keep, int n, const unsigned char *drop)
{
    const win_turn *u = &turns[t];
    int from = u->start > keep ? u->start : keep;
    return !u->pinned && u->role != ROLE_PREAMBLE && from < u->start + u->len && from < n &&
           !drop[from];
}

int win_plan(const win_turn *turns, int n_turns, int n, int keep, int need, int target,
             int open_last, win_policy policy, unsigned char *drop)
{
    memset(drop, 0, (size_t)n);
    target = target < need ? need : target;
    int dropped = 0, whole = open_last ? n_turns - 1 : n_turns;
    for (int k = 0; k < whole && dropped < target; k++) {
        int t = -1; /* the next turn to go: the oldest, or the lowest read (the oldest of equals) */
        for (int u = 0; u < whole && (t < 0 || policy != WIN_OLDEST); u++)
            if (whole_candidate(turns, u, keep, n, drop) &&
                (t < 0 || turns[u].read < turns[t].read))
                t = u;
        if (t < 0)
            break;
        for (int i = turns[t].start; i < turns[t].start + turns[t].len && i < n; i++)
            if (i >= keep)
                drop[i] = 1, dropped++;
    }
    /* then the turn in progress, oldest first, by the same target: a reply longer than the window
     * slides in steps of `target`, not one token at a time */
    for (int i = 0; i < n && dropped < target; i++)
        if (!drop[i] && !fixed(turns, n_turns, keep, i))
            drop[i] = 1, dropped++;
    if (dropped < need) {
        memset(drop, 0, (size_t)n);
        return -1;
    }
    return dropped;
}

void win_fold_reading(win_turn *turns, int n_turns, int steps, win_policy policy)
{
    float decay = policy == WIN_LAST_READ ? 0 : WIN_READ_DECAY;
    for (int t = 0; t < n_turns; t++) {
        turns[t].read = decay * turns[t].read + (steps > 0 ? turns[t].took / steps : 0);
        turns[t].took = 0;
    }
}
