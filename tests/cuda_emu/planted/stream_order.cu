/* Planted: a kernel on one stream reads what a kernel on another wrote, with no event between
 * them, and the host copies the result on the legacy stream without waiting for the non-blocking
 * stream that made it. The default emulation runs all work in call order, which hides both;
 * CUDA_EMU_STREAMS=unordered (in CUDA_EMU_STRICT) runs unordered work in either order, and the
 * result is wrong under some seed. Correct: an event orders the streams, and the host waits. */
#include "planted.h"

__global__ void ramp(float *x) { x[threadIdx.x] = (float)threadIdx.x; }
__global__ void twice(float *y, const float *x) { y[threadIdx.x] = 2 * x[threadIdx.x]; }

int main()
{
    float y[32], want[32], *dx, *dy;
    cudaStream_t a, b;
    cudaEvent_t made;
    OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    OK(cudaEventCreate(&made));
    OK(cudaMalloc(&dx, sizeof y));
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaMemset(dx, 0, sizeof y));
    OK(cudaMemset(dy, 0, sizeof y));
    for (int i = 0; i < 32; i++)
        want[i] = 2.0f * i;
    ramp<<<1, 32, 0, a>>>(dx);
#ifndef PLANTED
    OK(cudaEventRecord(made, a));
    OK(cudaStreamWaitEvent(b, made, 0));
#endif
    twice<<<1, 32, 0, b>>>(dy, dx);
    OK(cudaGetLastError());
#ifndef PLANTED
    OK(cudaStreamSynchronize(b));
#endif
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, want, 32);
}
