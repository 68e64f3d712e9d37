/* Planted: a bounds check that lets the last thread read one element past its input
 * (AddressSanitizer reports the read). Correct: i < n. */
#include "planted.h"

__global__ void shift_sum(float *y, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef PLANTED
    if (i <= n - 1)
        y[i] = x[i] + x[i + 1];
#else
    if (i < n - 1)
        y[i] = x[i] + x[i + 1];
#endif
}

int main()
{
    enum { N = 100 };
    float x[N], y[N - 1], want[N - 1], *dx, *dy;
    for (int i = 0; i < N; i++)
        x[i] = (float)i;
    for (int i = 0; i < N - 1; i++)
        want[i] = (float)(2 * i + 1);
    OK(cudaMalloc(&dx, sizeof x));
    OK(cudaMalloc(&dy, sizeof x));
    OK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    shift_sum<<<(N + 31) / 32, 32>>>(dy, dx, N);
    OK(cudaGetLastError());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, N - 1);
}
