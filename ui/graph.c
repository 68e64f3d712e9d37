#include "graph.h"

#include <math.h>

void graph_push(graph *g, double v, char mark)
{
    g->v[g->head] = v;
    g->mark[g->head] = mark;
    g->head = (g->head + 1) % GRAPH_SAMPLES;
    if (g->n < GRAPH_SAMPLES)
        g->n++;
}

void graph_mark(graph *g, char mark)
{
    if (g->n)
        g->mark[(g->head + GRAPH_SAMPLES - 1) % GRAPH_SAMPLES] = mark;
}

double graph_columns(const graph *g, int cols, int rows, int *heights, char *marks)
{
    int shown = g->n < cols ? g->n : cols, pad = cols - shown;
    double mx = 0;
    for (int i = 0; i < shown; i++) {
        double v = g->v[(g->head - shown + i + GRAPH_SAMPLES) % GRAPH_SAMPLES];
        mx = v > mx ? v : mx;
    }
    for (int c = 0; c < cols; c++) {
        heights[c] = 0;
        marks[c] = 0;
        if (c < pad)
            continue;
        int k = (g->head - shown + (c - pad) + GRAPH_SAMPLES) % GRAPH_SAMPLES;
        heights[c] = mx > 0 ? (int)ceil(g->v[k] / mx * rows - 1e-9) : 0;
        marks[c] = g->mark[k];
    }
    return mx;
}
