/* Planted: a block's maximum through shared memory, where 8 of the 32 slots are never written (the
 * block has 24 threads). fmaxf drops the NaN poison, so the result is right by default; with the
 * device code traced (--emu-trace-memory) and CUDA_EMU_UNINIT=report the read of a never-written
 * slot fails the launch, naming the line. Correct: the missing slots written with the identity. */
#include "planted.h"

__global__ void block_max(float *y, const float *x)
{
    __shared__ float s[32];
    s[threadIdx.x] = x[threadIdx.x];
#ifndef PLANTED
    if (threadIdx.x < 8)
        s[24 + threadIdx.x] = -INFINITY;
#endif
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = s[0];
        for (int i = 1; i < 32; i++)
            m = fmaxf(m, s[i]);
        *y = m;
    }
}

int main()
{
    float x[24], y, want = 23, *dx, *dy;
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    OK(cudaMalloc(&dx, sizeof x));
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    block_max<<<1, 24>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaMemcpy(&y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(&y, &want, 1);
}
