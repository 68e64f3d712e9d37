/* A history graph in the style of htop's graph meters: the last values, scaled to their maximum,
 * with marks (grow, evict) on the samples where they happened. */
#ifndef KVCHAT_UI_GRAPH_H
#define KVCHAT_UI_GRAPH_H

#define GRAPH_SAMPLES 512

typedef struct {
    double v[GRAPH_SAMPLES];
    char mark[GRAPH_SAMPLES];
    int head, n;
} graph;

void graph_push(graph *g, double v, char mark);
/* Sets the mark of the newest sample (an event after the value was taken). */
void graph_mark(graph *g, char mark);
/* The newest `cols` samples as column heights in 0..rows (the highest value fills all rows), oldest
 * first; marks copied beside. Returns the scale (the maximum shown). */
double graph_columns(const graph *g, int cols, int rows, int *heights, char *marks);

#endif
