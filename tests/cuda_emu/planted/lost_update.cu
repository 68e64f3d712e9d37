/* Planted: 256 threads count into shared memory with a plain read-modify-write. The default
 * emulation runs each thread from one barrier to the next without a switch, which hides it; built
 * with --emu-trace-memory and run with CUDA_EMU_SWITCH=stores (in CUDA_EMU_STRICT), each store
 * lets the other threads run first and updates are lost. Correct: atomicAdd. */
#include "planted.h"

__global__ void count(float *out)
{
    __shared__ int c;
    if (threadIdx.x == 0)
        c = 0;
    __syncthreads();
#ifdef PLANTED
    c = c + 1;
#else
    atomicAdd(&c, 1);
#endif
    __syncthreads();
    if (threadIdx.x == 0)
        *out = (float)c;
}

int main()
{
    float got, want = 256, *d;
    OK(cudaMalloc(&d, sizeof got));
    count<<<1, 256>>>(d);
    OK(cudaGetLastError());
    OK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    return compare(&got, &want, 1);
}
