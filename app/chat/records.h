/* The session's records that more than one place writes or reads, each encoded and decoded here:
 * the sampling block (the header's "sampling", a "set" event's fields, a "turn_end"'s "sampling")
 * and the turn_end record (the engine writes it as a turn closes; resuming reads the last one of
 * each conversation). */
#ifndef KVCHAT_RECORDS_H
#define KVCHAT_RECORDS_H

#include <jansson.h>

#include <stdint.h>

#include "../../model/events.h"
#include "../../model/sampler.h"
#include "../../model/window.h"

/* the block of these settings */
ev_sampling rec_sampling(const sampler_params *sp, int n_predict);
/* The block's values (a validated block: session_file.c's reader checked its types and ranges);
 * n_predict may be NULL. */
void rec_sampling_read(const json_t *block, sampler_params *sp, int *n_predict);

/* A turn_end: the reply and how it ended, and the conversation as it left it (window, turns,
 * sampler). */
typedef struct {
    const char *reply; /* decoded: the record's own string */
    int tokens, cancelled, failed;
    const int *ids; /* [n_ids] the window's token ids */
    int n_ids;
    const win_turn *turns; /* [n_turns] */
    int n_turns, keep;
    uint64_t rng; /* the sampler's state after the reply */
    sampler_params sp;
    int n_predict, approximate;
    int reads; /* --evict least-read: each turn's decayed share of attention goes with it */
} rec_turn_end;

/* Emits the record as conversation conv's turn_end event. */
void rec_turn_end_emit(ev_bus *bus, int conv, const rec_turn_end *t);
/* A validated record's values; ids and turns are allocated (the caller frees both, also on
 * failure). 0, or -1 with the error set. */
int rec_turn_end_read(const json_t *ev, rec_turn_end *t, int **ids, win_turn **turns);

#endif
