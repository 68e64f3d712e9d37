#include "graph.h"

#include <math.h>
#include <string.h>

/* E an eviction that stalled a reply, P one prepared ahead, F a fork, O an offload, G a grow */
static int weight(char mark)
{
    const char *order = "GOFPE", *at = mark ? strchr(order, mark) : NULL;
    return at ? (int)(at - order) + 1 : 0;
}

static char weightier(char a, char b) { return weight(a) >= weight(b) ? a : b; }

void graph_push(graph *g, double v, char mark)
{
    int step = g->step > 0 ? g->step : 1;
    if (g->n && g->filled < step) { /* the newest sample still has room: it takes the larger */
        g->v[g->n - 1] = v > g->v[g->n - 1] ? v : g->v[g->n - 1];
        g->mark[g->n - 1] = weightier(g->mark[g->n - 1], mark);
        g->filled++;
        return;
    }
    if (g->n == GRAPH_SAMPLES) { /* full: pairs merge, each sample now covers twice the events */
        for (int i = 0; i < GRAPH_SAMPLES / 2; i++) {
            double a = g->v[2 * i], b = g->v[2 * i + 1];
            g->v[i] = a > b ? a : b;
            g->mark[i] = weightier(g->mark[2 * i], g->mark[2 * i + 1]);
        }
        g->n = GRAPH_SAMPLES / 2;
        g->step = step * 2;
    }
    g->v[g->n] = v;
    g->mark[g->n] = mark;
    g->n++;
    g->filled = 1;
}

void graph_mark(graph *g, char mark)
{
    if (g->n)
        g->mark[g->n - 1] = weightier(g->mark[g->n - 1], mark);
}

double graph_columns(const graph *g, int cols, int rows, int *heights, char *marks)
{
    double mx = 0;
    for (int i = 0; i < g->n; i++)
        mx = g->v[i] > mx ? g->v[i] : mx;
    int per = g->n > cols ? (g->n + cols - 1) / cols : 1;
    for (int c = 0; c < cols; c++) {
        heights[c] = 0;
        marks[c] = 0;
        double v = 0;
        for (int k = c * per; k < (c + 1) * per && k < g->n; k++) {
            v = g->v[k] > v ? g->v[k] : v;
            marks[c] = weightier(marks[c], g->mark[k]);
        }
        heights[c] = mx > 0 ? (int)ceil(v / mx * rows - 1e-9) : 0;
    }
    return mx;
}
