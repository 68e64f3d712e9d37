/* Planted: a __syncthreads inside a branch that only the first warp takes, while the second warp
 * waits at the next barrier (undefined in CUDA: the emulator names both lines). Correct: the
 * barrier outside the branch. */
#include "planted.h"

__global__ void pairs(float *y)
{
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = (float)t;
#ifdef PLANTED
    if (t < 32)
        __syncthreads();
#else
    __syncthreads();
#endif
    float v = s[63 - t];
    __syncthreads();
    y[t] = v;
}

int main()
{
    float y[64], want[64], *dy;
    for (int i = 0; i < 64; i++)
        want[i] = (float)(63 - i);
    OK(cudaMalloc(&dy, sizeof y));
    pairs<<<1, 64>>>(dy);
    OK(cudaGetLastError());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, 64);
}
