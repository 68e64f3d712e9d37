/* Inside the emulated device: what its parts (sched.cpp, device.cpp, blas.cpp) share. */
#ifndef CUEMU_EMU_H
#define CUEMU_EMU_H

#include <string>

#include "../include/cuda_runtime.h"

namespace cuemu {

/* one kernel launch, as queued */
struct kernel_launch {
    std::string callee; /* the launched expression, as the source spells it */
    const char *file;
    int line;
    config cfg;
    std::function<void()> body; /* one GPU thread's run of the kernel */
};

/* Runs every block of a launch, in an order drawn from seed, each block's threads as fibers whose order
 * between barriers is drawn from it too. false, with *why set, when the kernel did something CUDA
 * leaves undefined or that would fault (the launch then fails, as a GPU's does). */
bool run_grid(const kernel_launch &k, uint64_t seed, std::string *why);

/* the device's figures (an H200's) */
const cudaDeviceProp &device_prop(void);

/* a queued piece of work that fails: the device's error from now on (sticky, as after a GPU fault) */
void device_fault(cudaError_t e, const std::string &why);

/* [p, p + bytes) lies in one device allocation (for the libraries' checks of what they read and write) */
bool in_device_memory(const void *p, size_t bytes);

/* Queues work on a stream, or records it when the stream is capturing; cudaSuccess or the error the
 * queueing call returns. what names it in errors. */
cudaError_t enqueue(cudaStream_t s, const char *what, std::function<void()> fn);

/* the value of an environment variable as a number, or def */
long env_long(const char *name, long def);

} /* namespace cuemu */

#endif
