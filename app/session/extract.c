/* One conversation of a chat as a session of its own (/save): what replays, verifies and resumes
 * alone. */
#include <stdlib.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "session.h"

/* the index of the /fork event that made conversation id before event `before`, or -1 */
static int made_by_fork(json_t *const *evs, int before, int id)
{
    for (int i = before - 1; i >= 0; i--)
        if (ev_fork_made_conv(evs[i]) && ev_conv(evs[i]) == id)
            return i;
    return -1;
}

json_t **session_extract(json_t *const *evs, int n, int conv, int *k)
{
    /* the conversation, its parent up to the fork, that one's parent up to its fork, ... */
    int *ids = err_malloc(sizeof(int) * ((size_t)n + 1), "a saved conversation's history");
    int *until = err_malloc(sizeof(int) * ((size_t)n + 1), "a saved conversation's history");
    json_t **out = err_malloc(sizeof *out * ((size_t)n + 1), "a saved conversation's events");
    int m = 0;
    *k = 0;
    if (ids && until && out) {
        ids[0] = conv, until[0] = n, m = 1;
        for (int f; m <= n && (f = made_by_fork(evs, until[m - 1], ids[m - 1])) >= 0; m++)
            ids[m] = ev_fork_parent(evs[f]), until[m] = f;
    }
    for (int i = 0; i < n && m; i++) {
        int c = ev_conv(evs[i]), j = 0;
        while (j < m && !(ids[j] == c && i < until[j]))
            j++;
        if (c && j == m)
            continue;
        /* numbered in the order they were made, the first ancestor 1, as a verify makes them */
        json_t *ev = c ? json_copy(evs[i]) : json_incref(evs[i]);
        if (c && ev)
            json_object_set_new(ev, "conv", json_integer(m - j));
        if (c && ev && ev_kind_of(ev) == EVK_FORK && ev_fork_has_parent(ev))
            json_object_set_new(ev, "parent", json_integer(m - j - 1));
        if (!ev) {
            err_set("out of memory copying a saved conversation's events");
            while (*k)
                json_decref(out[--*k]);
            free(out);
            out = NULL;
            break;
        }
        out[(*k)++] = ev;
    }
    free(ids);
    free(until);
    return out;
}
