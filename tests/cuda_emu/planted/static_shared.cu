/* Planted: 52 KB of static shared memory in one block (ptxas refuses more than 48 KB; the
 * emulator fails the launch saying so). Correct: 48 KB. */
#include "planted.h"

#ifdef PLANTED
enum { N = 13 * 1024 };
#else
enum { N = 12 * 1024 };
#endif

__global__ void spread(float *y)
{
    __shared__ float s[N];
    for (int i = threadIdx.x; i < N; i += blockDim.x)
        s[i] = (float)i;
    __syncthreads();
    y[threadIdx.x] = s[N - 1 - threadIdx.x];
}

int main()
{
    float y[32], want[32], *dy;
    for (int i = 0; i < 32; i++)
        want[i] = (float)(N - 1 - i);
    OK(cudaMalloc(&dy, sizeof y));
    spread<<<1, 32>>>(dy);
    OK(cudaGetLastError());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, 32);
}
