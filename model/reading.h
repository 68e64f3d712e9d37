/* Where a reply's tokens read: the weight attention gives each turn of the window, per decode step
 * (the backend's probe, kernels/backend.h), reduced over heads and layers, averaged over steps and
 * told as attention events. The engine points the model's probe at it around each decode step; the
 * panel, the session log and the tests read the events. */
#ifndef KVCHAT_READING_H
#define KVCHAT_READING_H

#include "../kernels/backend.h"
#include "events.h"
#include "window.h"

typedef struct {
    kb_probe probe; /* what a step fills: gpt2_model.probe points here for a decode step */
    int n_layer, n_head;
    size_t cap_start, cap_mass, cap_mean, cap_max, cap_now, cap_no;
    int *start;         /* the spans: the kept prefix, then each turn */
    int *no;            /* each span's turn number (win_turn.no; 0: the kept prefix) */
    float *mass;        /* [n_layer][n_head][spans] */
    double *mean, *max; /* summed over the steps since the last event */
    double *now;        /* the last step's mean per span */
    int steps;
} rd_reading;

/* empty: the spans are made at the first step */
void rd_init(rd_reading *r, int n_layer, int n_head);
void rd_free(rd_reading *r);
/* Before a decode step over a window of n tokens: its spans, [0, keep) and then each turn's
 * positions at or past keep (a turn within the kept prefix is an empty span). When they are not
 * the spans the steps since the last event had, but for the last growing (an eviction moved them),
 * that event is told first (rd_tell). 0, or -1 with the error. */
int rd_spans(rd_reading *r, const win_turn *turns, int n_turns, int keep, int n, ev_bus *bus,
             int conv);
/* After the step: its mean over heads and layers and its max over them, per span, added */
void rd_step(rd_reading *r);
/* Emits an attention event of the steps since the last (none: nothing), and starts again */
void rd_tell(rd_reading *r, ev_bus *bus, int conv);

#endif
