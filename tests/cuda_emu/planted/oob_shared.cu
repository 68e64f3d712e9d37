/* Planted: a shared array one element too small for its block (AddressSanitizer reports the write).
 * Correct: one element a thread. */
#include "planted.h"

__global__ void square(float *y, const float *x)
{
#ifdef PLANTED
    __shared__ float s[63];
#else
    __shared__ float s[64];
#endif
    float *row = s; /* through a pointer: AddressSanitizer's catch, not UBSan's bounds check */
    row[threadIdx.x] = x[threadIdx.x] * x[threadIdx.x];
    __syncthreads();
    y[threadIdx.x] = row[threadIdx.x];
}

int main()
{
    float x[64], y[64], want[64], *dx, *dy;
    for (int i = 0; i < 64; i++)
        x[i] = (float)i, want[i] = (float)(i * i);
    OK(cudaMalloc(&dx, sizeof x));
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    square<<<1, 64>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, 64);
}
