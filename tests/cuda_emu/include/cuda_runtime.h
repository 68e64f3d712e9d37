/* The CUDA runtime API of the emulated device (tests/cuda_emu/README.md): the names, types and
 * error codes of NVIDIA's cuda_runtime.h for the calls kvchat's backend and small standalone
 * programs use, implemented on the CPU by runtime/device.cpp. */
#ifndef CUEMU_CUDA_RUNTIME_H
#define CUEMU_CUDA_RUNTIME_H

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <string.h>

#include "cuemu_device.h"

#define CUDART_VERSION 13000

/* the codes NVIDIA's driver_types.h gives these errors */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorAssert = 710,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureImplicit = 906,
    cudaErrorUnknown = 999,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
} cudaFuncAttribute;

typedef enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
} cudaDeviceAttr;

typedef enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
} cudaMemoryType;

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
};

#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor,
        totalConstMem;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], major, minor;
    int multiProcessorCount, maxThreadsPerMultiProcessor, l2CacheSize, persistingL2CacheMaxSize;
    int memoryBusWidth, memoryClockRate, clockRate, concurrentKernels, unifiedAddressing,
        canMapHostMemory;
    int integrated, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, asyncEngineCount;
    size_t memPitch;
};

typedef struct cuemu_stream *cudaStream_t;
typedef struct cuemu_event *cudaEvent_t;
typedef struct cuemu_graph *cudaGraph_t;
typedef struct cuemu_graph_exec *cudaGraphExec_t;
typedef struct cuemu_graph_node *cudaGraphNode_t;

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);
template <typename T>
static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
template <typename T>
static inline cudaError_t cudaHostAlloc(T **p, size_t bytes, unsigned flags)
{
    return cudaHostAlloc((void **)p, bytes, flags);
}
template <typename T>
static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
    return cudaMallocHost((void **)p, bytes);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s = 0);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind k);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind k, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int v, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s = 0);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status);

cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

cudaError_t cuemu_func_set_attribute(const void *f, cudaFuncAttribute a, int v);
template <typename F>
static inline cudaError_t cudaFuncSetAttribute(F *f, cudaFuncAttribute a, int v)
{
    return cuemu_func_set_attribute((const void *)f, a, v);
}

namespace cuemu
{

/* a launch's <<<grid, block, shared bytes, stream>>> */
struct config {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    config(dim3 g, dim3 b, size_t sh = 0, cudaStream_t s = 0)
        : grid(g), block(b), shared(sh), stream(s)
    {
    }
};

/* A kernel's first output: its first parameter that points to non-const numbers, with a function
 * that changes one such number. CUDA_EMU_FAULT=KERNEL changes the first number each launch of
 * KERNEL writes there: a planted fault, for the tests that must catch a wrong kernel. */
struct output_arg {
    void *p;
    size_t size;
    void (*perturb)(void *);
};

template <typename T>
static void perturb_number(void *p)
{
    T v;
    memcpy(&v, p, sizeof v);
    if constexpr (std::is_floating_point_v<T>)
        v += (T)0.25 * ((v < 0 ? -v : v) + 1);
    else
        v = (T)(v + 1);
    memcpy(p, &v, sizeof v);
}

/* A kernel's arguments as the launch checks them: each pointer argument's value, and where each
 * struct argument lies (its bytes are searched for pointers into host memory) */
struct arg_list {
    const void *pointers[64];
    int n_pointers;
    struct {
        const void *p;
        size_t bytes;
        int index;
    } structs[64];
    int n_structs, n_args;
};

/* Queues a kernel: body runs it for one GPU thread (the fiber's). Its pointer arguments, and the
 * pointers its struct arguments hold, must point into device or pinned memory. Errors as
 * cudaGetLastError reports them. */
void launch_kernel(const char *callee, const char *file, int line, const config &c, const void *fn,
                   std::function<void()> body, const arg_list &args, output_arg out);

template <typename T>
static inline void note_arg(arg_list *l, const T &v)
{
    if constexpr (std::is_pointer_v<T>) /* through an integer: a volatile pointee too */
        l->pointers[l->n_pointers++] = (const void *)(uintptr_t)v;
    if constexpr (std::is_class_v<T>)
        l->structs[l->n_structs++] = {&v, sizeof v, l->n_args + 1};
    l->n_args++;
}

template <typename T>
static inline void note_output(output_arg *o, const T &v)
{
    if constexpr (std::is_pointer_v<T>) {
        typedef std::remove_pointer_t<T> P;
        typedef std::remove_volatile_t<P> E;
        if constexpr (!std::is_const_v<P> && std::is_arithmetic_v<E>)
            if (!o->p)
                *o = output_arg{(void *)(uintptr_t)v, sizeof(E), perturb_number<E>};
    }
    (void)o, (void)v;
}

/* The arguments are converted to the kernel's parameter types and kept by value now: a launch that
 * a stream capture records replays these values, as CUDA's kernel nodes do. */
template <typename... P, typename... A>
void launch(const char *callee, const char *file, int line, const config &c, void (*fn)(P...),
            A &&...a)
{
    static_assert(sizeof...(P) == sizeof...(A),
                  "a kernel launched with the wrong number of arguments");
    auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(a)...);
    static_assert(sizeof...(P) <= 64, "a kernel of more than 64 parameters");
    arg_list l;
    l.n_pointers = l.n_structs = l.n_args = 0;
    output_arg out = {nullptr, 0, nullptr};
    std::apply([&](const auto &...v) { (note_arg(&l, v), ...); }, *args);
    std::apply([&](const auto &...v) { (note_output(&out, v), ...); }, *args);
    auto body = [fn, args]() { std::apply(fn, *args); };
    launch_kernel(callee, file, line, c, (const void *)fn, body, l, out);
}

} /* namespace cuemu */

#endif
