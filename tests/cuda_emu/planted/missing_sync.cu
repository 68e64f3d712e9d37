/* Planted: shared memory read without the __syncthreads that publishes it (a wrong result under
 * some seed). Correct: the barrier between the writes and the reads. */
#include "planted.h"

__global__ void reverse(float *y, const float *x)
{
    __shared__ float s[128];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 128 + t];
#ifndef PLANTED
    __syncthreads();
#endif
    y[blockIdx.x * 128 + t] = s[127 - t];
}

int main()
{
    enum { B = 4, N = 128 * B };
    float x[N], y[N], want[N], *dx, *dy;
    for (int i = 0; i < N; i++)
        x[i] = (float)i, want[i] = (float)(i / 128 * 128 + 127 - i % 128);
    OK(cudaMalloc(&dx, sizeof x));
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    reverse<<<B, 128>>>(dy, dx);
    OK(cudaGetLastError());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, N);
}
