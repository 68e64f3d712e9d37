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

int win_plan(const win_turn *turns, int n_turns, int n, int keep, int need, int target,
             int open_last, unsigned char *drop)
{
    memset(drop, 0, (size_t)n);
    target = target < need ? need : target;
    int dropped = 0, whole = open_last ? n_turns - 1 : n_turns;
    for (int t = 0; t < whole && dropped < target; t++) {
        if (turns[t].pinned || turns[t].role == ROLE_PREAMBLE)
            continue;
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
