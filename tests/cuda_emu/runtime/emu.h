/* Inside the emulated device: what its parts (sched.cpp, device.cpp, stream.cpp, blas.cpp) share.
 */
#ifndef CUEMU_EMU_H
#define CUEMU_EMU_H

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "../include/cuda_runtime.h"

/* what the runtime API's handles point to */
struct cuemu_stream {
    unsigned flags;
    bool capturing, invalidated;
    cudaStreamCaptureMode mode;
    cudaGraph_t graph;
};
struct event_state {
    bool recorded, done;
    double t;
    uint64_t seq; /* the queued record's (device.cpp's queue), 0 when captured */
};
struct cuemu_event {
    unsigned flags;
    std::shared_ptr<event_state> s;
};
/* a queued copy, set, kernel or product; a graph's node */
struct work {
    std::string what;
    std::function<void()> fn;
};
struct cuemu_graph {
    std::vector<std::shared_ptr<work>> nodes;
};
struct cuemu_graph_exec {
    std::shared_ptr<std::vector<std::shared_ptr<work>>> nodes;
};

namespace cuemu
{

/* one kernel launch, as queued */
struct kernel_launch {
    std::string callee; /* the launched expression, as the source spells it */
    const char *file;
    int line;
    config cfg;
    std::function<void()> body; /* one GPU thread's run of the kernel */
};

/* Runs every block of a launch, in an order drawn from seed, each block's threads as fibers whose
 * order between barriers is drawn from it too. false, with *why set, when the kernel did something
 * CUDA leaves undefined or that would fault (the launch then fails, as a GPU's does). *name: the
 * kernel's (its __global__ function's), once a block has started. */
bool run_grid(const kernel_launch &k, uint64_t seed, std::string *why, const char **name);

/* Before a kernel's store of n bytes to p (the hooks of runtime/trace.cpp): marks them written;
 * with CUDA_EMU_SWITCH=stores (strict), a store outside the fiber's own stack and outside an atomic
 * lets the block's other threads run first, so a read-modify-write that is not atomic loses
 * updates, as on a GPU. */
void store_point(const void *p, size_t n);
/* Before a kernel's load of n bytes at p, made by the instruction at pc: with
 * CUDA_EMU_UNINIT=report (strict), bytes of device or shared memory never written fail the launch,
 * naming the kernel, the thread, the bytes and the source line. */
void load_point(const void *p, size_t n, const char *pc);

/* written.cpp: which bytes of device and shared memory were ever written, tracked when the device
 * code is traced (trace_memory_on, called by its hooks' start) and CUDA_EMU_UNINIT=report */
void trace_memory_on(void);
bool written_on(void);
/* [p, p + bytes) is memory to track, all of it never written; what names it in reports */
void written_track(const void *p, size_t bytes, const char *what);
void written_untrack(const void *p);
/* [p, p + n) written (its tracked parts) */
void written_mark(const void *p, size_t n);
/* a copy of n bytes: dst's tracked bytes take src's state (bytes outside any region: written) */
void written_copy(void *dst, const void *src, size_t n);
/* false, with why saying which byte of what, when a tracked byte of [p, p + n) was never written */
bool written_check(const void *p, size_t n, char *why, size_t size);

/* the device's figures (an H200's) */
const cudaDeviceProp &device_prop(void);

/* a queued piece of work that fails: the device's error from now on (sticky, as after a GPU fault)
 */
void device_fault(cudaError_t e, const std::string &why);

/* A CUDA object handed to the program (an event, a graph and its instance, a library handle):
 * kept reachable until the program destroys it, as a driver keeps them until exit, so that
 * LeakSanitizer does not call a correct program's undestroyed objects leaks */
void keep(const void *object);
void forget(const void *object);

/* [p, p + bytes) lies in one device allocation (for the libraries' checks of what they read and
 * write) */
bool in_device_memory(const void *p, size_t bytes);

/* Queues work on a stream, or records it when the stream is capturing; cudaSuccess or the error the
 * queueing call returns. what names it in errors. */
cudaError_t enqueue(cudaStream_t s, const char *what, std::function<void()> fn);

/* The state the runtime API's files share (device.cpp keeps it): the lock every call holds, the
 * streams, the queue, and the errors. */
std::recursive_mutex &device_mutex(void);
typedef std::lock_guard<std::recursive_mutex> device_guard;
std::set<cudaStream_t> &device_streams(void);
bool valid_stream(cudaStream_t s);
/* an error a call returns, as cudaGetLastError then reports it, with the emulator's account */
__attribute__((format(printf, 2, 3))) cudaError_t api_fail(cudaError_t e, const char *fmt, ...);
/* the device's sticky error, or cudaSuccess */
cudaError_t sticky_error(void);
/* the device has faulted: its error is sticky (device.cpp) */
bool device_faulted(void);
/* queue.cpp: */
/* runs everything queued; drop_queued forgets it (a reset) */
void run_queued(void);
void drop_queued(void);
/* a call that a capture in global or thread-local mode forbids: invalidates it and fails, else
 * cudaSuccess */
cudaError_t forbidden_in_capture(const char *call);
/* a synchronous copy or set: fn queued on the legacy stream, the host waiting until it has run */
cudaError_t wait_for(const char *call, std::function<void()> fn);
/* a synchronising call's wait: everything queued runs first (a capture forbids it) */
cudaError_t wait_all(const char *call);
/* the number of the work queued last (an event's record is known by it) */
uint64_t last_queued(void);
/* Waits until stream s has nothing queued, or until work number seq has run (0: at once). With
 * ordered streams (the default) every wait runs everything. */
cudaError_t wait_stream(cudaStream_t s, const char *call);
cudaError_t wait_seq(uint64_t seq, const char *call);
/* Queues on s a wait for work number seq (an event's record): what s queues after it runs after
 * that. */
cudaError_t enqueue_wait(cudaStream_t s, uint64_t seq);

/* the value of an environment variable as a number, or def */
long env_long(const char *name, long def);

/* A mode of the stricter emulation: the variable var's value when set, else strict_value under
 * CUDA_EMU_STRICT=1, else plain_value. Read once per variable. */
const char *emu_mode(const char *var, const char *strict_value, const char *plain_value);

/* Fills memory that was never written: 0xff (NaN, or -1) by default; with CUDA_EMU_POISON=random
 * (strict) finite values drawn from CUDA_EMU_SEED, so that a never-written value that a max or a
 * comparison hides still changes the result from one seed to the next. */
void poison(void *p, size_t bytes);

} /* namespace cuemu */

#endif
