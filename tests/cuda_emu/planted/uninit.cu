/* Planted: a kernel that reads device memory never written (the emulator's poison reads as NaN).
 * Correct: the memory is set first. */
#include "planted.h"

__global__ void twice(float *y, const float *x) { y[threadIdx.x] = 2 * x[threadIdx.x]; }

int main()
{
    float y[32], want[32], *dx, *dy;
    for (int i = 0; i < 32; i++)
        want[i] = 0;
    OK(cudaMalloc(&dx, sizeof y));
    OK(cudaMalloc(&dy, sizeof y));
#ifndef PLANTED
    OK(cudaMemset(dx, 0, sizeof y));
#endif
    twice<<<1, 32>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, 32);
}
