/* Planted: a warp sum by full-mask __shfl_xor_sync after lane 31 has returned early (a shuffle then
 * reads a lane that is gone: undefined in CUDA, a named error here). Correct: every lane stays. */
#include "planted.h"

__global__ void warp_sum(float *y, const float *x)
{
    float v = x[threadIdx.x];
#ifdef PLANTED
    if (threadIdx.x == 31)
        return;
#endif
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0)
        y[0] = v;
}

int main()
{
    float x[32], y = 0, want = 0, *dx, *dy;
    for (int i = 0; i < 32; i++)
        x[i] = (float)i, want += (float)i;
    OK(cudaMalloc(&dx, sizeof x));
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    warp_sum<<<1, 32>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaMemcpy(&y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(&y, &want, 1);
}
