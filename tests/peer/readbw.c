/* The machine's memory read bandwidth, the floor decode is measured against: every thread sums its
 * share of a 1 GiB array (far past the caches), best of 5 passes, in GB/s. Usage: readbw [THREADS]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    size_t n = (size_t)1 << 27; /* doubles: 1 GiB */
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    double *a = malloc(n * sizeof *a), best = 0, sink = 0;
    if (!a || threads < 1) {
        fprintf(stderr, "readbw: %s\n", a ? "bad thread count" : "out of memory");
        return 1;
    }
    memset(a, 1, n * sizeof *a);
    for (int pass = 0; pass < 5; pass++) {
        double t0 = omp_get_wtime(), s = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++)
            s += a[i];
        double gbs = n * sizeof *a / (omp_get_wtime() - t0) / 1e9;
        best = gbs > best ? gbs : best;
        sink += s;
    }
    printf("%.1f\n", best + 0 * sink);
    free(a);
    return 0;
}
