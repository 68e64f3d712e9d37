/* How many threads a CPU step runs with. With the default count (every core the process may run
 * on), decode steps time themselves: now and then one runs with one thread fewer, each count keeps
 * a moving average of its step time, and the faster runs the steps between. When another process
 * takes a core, the threads no longer wait at every barrier for a core they do not get (a step with
 * two threads on two cores, one of them busy, took three times one thread's). The kernels give the
 * same results with any count (kernels/cpu/matmul.c's fixed bands), so this changes speed only.
 * -t N fixes the count. */
#include <time.h>

#include "cpu.h"

enum { PROBE_EVERY = 16 };

void cpu_threads_init(cpu_threads *t, int max, int adaptive)
{
    *t = (cpu_threads){
        .count = {max, max > 1 ? max - 1 : 1}, .adaptive = adaptive && max > 1, .best = 0};
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cpu_threads_begin(cpu_threads *t, int decode)
{
    t->timing = -1;
    if (!t->adaptive || !decode)
        return t->count[t->best];
    t->steps++;
    /* the other count: once early, then every PROBE_EVERY steps */
    int probe = !t->seen[1] ? t->steps == 2 : t->steps % PROBE_EVERY == 0,
        i = probe ? 1 - t->best : t->best;
    t->timing = i;
    t->t0 = now();
    return t->count[i];
}

void cpu_threads_end(cpu_threads *t)
{
    int i = t->timing;
    if (i < 0)
        return;
    double dt = now() - t->t0;
    t->avg[i] = t->seen[i] ? 0.75 * t->avg[i] + 0.25 * dt : dt;
    t->seen[i] = 1;
    t->best = t->seen[0] && t->seen[1] && t->avg[1] < t->avg[0] ? 1 : 0;
    t->timing = -1;
}
