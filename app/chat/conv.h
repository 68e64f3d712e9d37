/* One conversation, as the chat room's files share it (the engine, eviction, the fidelity check);
 * not part of the engine's public header. */
#ifndef KVCHAT_CONV_H
#define KVCHAT_CONV_H

#include "../../model/draft.h"
#include "../../model/kvcache.h"
#include "../../model/sampler.h"
#include "../../model/window.h"

typedef struct conv {
    int id;
    kv_seq *seq;
    int *ids, n_ids; /* the window: exactly what the cache holds */
    size_t cap_ids;
    win_turn *turns;
    int n_turns;
    size_t cap_turns;
    int keep;
    int gone_no; /* the highest number of a turn an eviction dropped: numbering goes on past it */
    sampler smp;
    double last_used;
    long long needed, served;   /* tokens the model needed / found in the cache */
    int evictions, approximate; /* approximate: a shift eviction happened */
    int fid_checks, fid_agree;
    int turns_done; /* turn_end records written: ties a KV snapshot to this exact point */
    int settled;    /* the window's length when its last turn ended (or less, after a rollback) */
    struct prep *plan; /* a prepared eviction (eviction.c), or NULL */
    drafter *draft;    /* --draft: its drafter, whose cache follows the window */
} conv;

#endif
