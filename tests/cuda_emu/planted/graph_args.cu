/* Planted: a graph replayed after the host changed an argument it captured: CUDA replays the
 * captured value, so the result is the old one (what this program expects to see). Correct: the
 * capture made again after the change gives the new value. */
#include "planted.h"

__global__ void fill(float *y, float v) { y[threadIdx.x] = v; }

int main()
{
    float y[32], want[32], *dy, value = 1.0f;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    fill<<<1, 32, 0, s>>>(dy, value);
    OK(cudaGetLastError());
    OK(cudaStreamEndCapture(s, &g));
    value = 2.0f; /* after the capture: the recording keeps 1 */
#ifndef PLANTED
    OK(cudaGraphDestroy(g));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    fill<<<1, 32, 0, s>>>(dy, value);
    OK(cudaStreamEndCapture(s, &g));
#endif
    OK(cudaGraphInstantiate(&exec, g, 0));
    OK(cudaGraphLaunch(exec, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
#ifdef PLANTED
    for (int i = 0; i < 32; i++)
        want[i] = 1.0f;
#else
    for (int i = 0; i < 32; i++)
        want[i] = 2.0f;
#endif
    return compare(y, want, 32);
}
