/* A history graph in the style of htop's graph meters, kept for a conversation's whole life: when
 * its samples fill, pairs merge (the larger value, the weightier mark) and each sample covers twice
 * as many events, so the axis rescales instead of forgetting the start. Marks (grow, evict, fork,
 * offload) survive merging by weight, so a grow after an eviction never hides it. */
#ifndef KVCHAT_UI_GRAPH_H
#define KVCHAT_UI_GRAPH_H

#define GRAPH_SAMPLES 512

typedef struct {
    double v[GRAPH_SAMPLES];
    char mark[GRAPH_SAMPLES];
    int n;      /* samples held */
    int step;   /* events per sample (a power of two; 0 read as 1) */
    int filled; /* events in the newest sample */
} graph;

void graph_push(graph *g, double v, char mark);
/* Marks the newest sample (an event after the value was taken), unless it holds a weightier mark.
 */
void graph_mark(graph *g, char mark);
/* The whole history as `cols` column heights in 0..rows (the highest value fills all rows), oldest
 * first from the left (a new sample draws one new column, nothing shifts: the redraw stays small);
 * each column the largest value and weightiest mark of the samples it covers. Returns the scale. */
double graph_columns(const graph *g, int cols, int rows, int *heights, char *marks);

#endif
