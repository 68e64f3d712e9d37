/* What the planted-bug programs share: a check on every CUDA call, and the verdict they print. Each
 * program is built twice, with -DPLANTED (the bug) and without (its correct counterpart);
 * test_planted.sh says how each bug must be caught. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#define OK(call)                                                      \
    do {                                                              \
        cudaError_t e_ = (call);                                      \
        if (e_ != cudaSuccess) {                                      \
            printf("error: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(3);                                                  \
        }                                                             \
    } while (0)

/* 0 when got[i] == want[i] for all n, else prints the first difference and returns 1 */
static inline int compare(const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            printf("wrong: element %d is %g, want %g\n", i, got[i], want[i]);
            return 1;
        }
    printf("right\n");
    return 0;
}
