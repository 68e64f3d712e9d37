#include "reading.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"

void rd_init(rd_reading *r, int n_layer, int n_head)
{
    memset(r, 0, sizeof *r);
    r->n_layer = n_layer;
    r->n_head = n_head;
}

void rd_free(rd_reading *r)
{
    free(r->start);
    free(r->mass);
    free(r->mean);
    free(r->max);
    free(r->now);
    free(r->no);
    memset(r, 0, sizeof *r);
}

static int reserve(rd_reading *r, int spans)
{
    const char *what = "the attention's spans";
    size_t S = (size_t)spans;
    return err_grow(&r->start, &r->cap_start, S + 1, sizeof *r->start, what) ||
                   err_grow(&r->mass, &r->cap_mass, (size_t)r->n_layer * r->n_head * S,
                            sizeof *r->mass, what) ||
                   err_grow(&r->mean, &r->cap_mean, S, sizeof *r->mean, what) ||
                   err_grow(&r->max, &r->cap_max, S, sizeof *r->max, what) ||
                   err_grow(&r->now, &r->cap_now, S, sizeof *r->now, what) ||
                   err_grow(&r->no, &r->cap_no, S, sizeof *r->no, what)
               ? -1
               : 0;
}

/* boundary i of the spans of a window of n: 0, keep, then each turn's end (the turns tile the
 * window in order), clipped to the kept prefix */
static int boundary(const win_turn *turns, int n_turns, int keep, int n, int i)
{
    if (i == 0 || i == 1)
        return i ? keep : 0;
    if (i == n_turns + 1)
        return n;
    int end = turns[i - 2].start + turns[i - 2].len;
    return end > keep ? end : keep;
}

int rd_spans(rd_reading *r, const win_turn *turns, int n_turns, int keep, int n, ev_bus *bus,
             int conv)
{
    int S = n_turns + 1;
    keep = keep < n ? keep : n;
    int same = r->steps && r->probe.n_spans == S;
    for (int i = 1; same && i < S; i++)
        same = r->start[i] == boundary(turns, n_turns, keep, n, i) && r->no[i] == turns[i - 1].no;
    if (r->steps && !same)
        rd_tell(r, bus, conv);
    if (reserve(r, S))
        return -1;
    for (int i = 0; i <= S; i++)
        r->start[i] = boundary(turns, n_turns, keep, n, i);
    for (int i = 0; i < S; i++)
        r->no[i] = i ? turns[i - 1].no : 0;
    if (!r->steps) {
        memset(r->mean, 0, sizeof(double) * (size_t)S);
        memset(r->max, 0, sizeof(double) * (size_t)S);
    }
    r->probe = (kb_probe){r->start, S, r->mass};
    return 0;
}

void rd_step(rd_reading *r)
{
    int S = r->probe.n_spans, LH = r->n_layer * r->n_head;
    for (int s = 0; s < S; s++) {
        double sum = 0, most = 0;
        for (int i = 0; i < LH; i++) {
            double m = r->mass[(size_t)i * S + s];
            sum += m;
            most = m > most ? m : most;
        }
        r->now[s] = sum / LH;
        r->mean[s] += sum / LH;
        r->max[s] += most;
    }
    r->steps++;
}

/* a weight for the event: within 0..1 (a head's sum may round past 1) */
static double share(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

void rd_tell(rd_reading *r, ev_bus *bus, int conv)
{
    if (!r->steps)
        return;
    int S = r->probe.n_spans;
    int *spans = err_malloc(sizeof(int) * (size_t)(2 * S + 1), "the attention event");
    double *mean =
        spans ? err_malloc(sizeof(double) * (size_t)(2 * S + 1), "the attention event") : NULL;
    for (int s = 0; mean && s < S; s++) {
        spans[2 * s] = r->start[s];
        spans[2 * s + 1] = r->start[s + 1] - r->start[s];
        mean[s] = share(r->mean[s] / r->steps);
        mean[S + s] = share(r->max[s] / r->steps);
    }
    if (mean) /* else the event is lost, as any is when memory runs out */
        ev_emit_attention(bus, conv,
                          &(ev_attention){.spans = spans,
                                          .n_spans = S,
                                          .mean = mean,
                                          .n_mean = S,
                                          .max = mean + S,
                                          .n_max = S,
                                          .turns = r->no,
                                          .n_turns = S,
                                          .has_turns = 1,
                                          .tokens = r->steps});
    free(spans);
    free(mean);
    r->steps = 0;
}
