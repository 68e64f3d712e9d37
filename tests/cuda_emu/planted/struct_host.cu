/* Planted: a struct argument holding a pointer to host memory (a GPU faults on it; the emulator
 * refuses the launch, naming the argument, and the error stays, as a GPU fault's does, for the
 * synchronisation that follows). Correct: the struct holds device pointers. */
#include "planted.h"

struct rows {
    const float *x;
    float *y;
    int n;
};

__global__ void copy_rows(rows r)
{
    if ((int)threadIdx.x < r.n)
        r.y[threadIdx.x] = r.x[threadIdx.x];
}

int main()
{
    float x[32], y[32], *dx, *dy;
    for (int i = 0; i < 32; i++)
        x[i] = (float)i;
    OK(cudaMalloc(&dx, sizeof x));
    OK(cudaMalloc(&dy, sizeof y));
    OK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
#ifdef PLANTED
    rows r = {x, dy, 32};
#else
    rows r = {dx, dy, 32};
#endif
    copy_rows<<<1, 32>>>(r);
    /* checked at the synchronisation alone, as much code does: a GPU's fault is reported there */
    OK(cudaDeviceSynchronize());
    OK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
    return compare(y, x, 32);
}
