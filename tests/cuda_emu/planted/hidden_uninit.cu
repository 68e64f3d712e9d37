/* Planted: a maximum over a buffer whose last elements were never written. The default poison
 * (NaN) hides it, since fmaxf drops a NaN; the random finite poison (CUDA_EMU_POISON=random, in
 * CUDA_EMU_STRICT) makes the result wrong under some seed. Correct: every element written. */
#include "planted.h"

__global__ void fill(float *x, int n) { x[threadIdx.x] = threadIdx.x < n ? -1.0f : 0; }

__global__ void maximum(float *y, const float *x)
{
    float m = -100;
    for (int i = 0; i < 32; i++)
        m = fmaxf(m, x[i]);
    *y = m;
}

int main()
{
    float y, want = -1, *dx, *dy;
    OK(cudaMalloc(&dx, 32 * sizeof(float)));
    OK(cudaMalloc(&dy, sizeof y));
#ifdef PLANTED
    fill<<<1, 24>>>(dx, 32); /* 8 of the 32 never written */
#else
    fill<<<1, 32>>>(dx, 32);
#endif
    maximum<<<1, 1>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaMemcpy(&y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(&y, &want, 1);
}
