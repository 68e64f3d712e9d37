/* Planted: a staging buffer in pinned memory filled after its copy was queued (the host assumes
 * the copy runs late). The default emulation reads pinned memory when the copy runs, which hides
 * it; CUDA_EMU_PINNED=call (in CUDA_EMU_STRICT) reads it at the call, as a copy engine may, and
 * the result is wrong. Correct: filled before the copy. */
#include "planted.h"

__global__ void twice(float *y, const float *x) { y[threadIdx.x] = 2 * x[threadIdx.x]; }

int main()
{
    float *h, y[32], want[32], *dx, *dy;
    cudaStream_t s;
    OK(cudaStreamCreate(&s));
    OK(cudaMallocHost((void **)&h, 32 * sizeof(float)));
    OK(cudaMalloc(&dx, sizeof y));
    OK(cudaMalloc(&dy, sizeof y));
    for (int i = 0; i < 32; i++)
        want[i] = 2.0f * i;
#ifndef PLANTED
    for (int i = 0; i < 32; i++)
        h[i] = (float)i;
#endif
    OK(cudaMemcpyAsync(dx, h, sizeof y, cudaMemcpyHostToDevice, s));
#ifdef PLANTED
    for (int i = 0; i < 32; i++)
        h[i] = (float)i;
#endif
    twice<<<1, 32, 0, s>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, 32);
}
