/* The emulated device's runtime API: its state, errors, queue and launches, properties and memory,
 * with CUDA's semantics where a program can tell them apart (streams, events and graphs: stream.cpp).
 *   Work is queued and runs only when the host waits for it (a synchronising call), so host code that
 *   reuses a buffer before its copy ran, or reads a result before waiting, sees it go wrong. A copy
 *   from pageable host memory takes its bytes at the call, and one into pageable memory waits, as
 *   CUDA's do; pinned memory is read and written when the copy runs (at the call under
 *   CUDA_EMU_PINNED=call). The queue and its orders: queue.cpp.
 *   Device memory is host memory from malloc, exactly the bytes asked for (AddressSanitizer sees a step
 *   past them), poisoned so that a read of bytes never written gives NaN or -1 (or, with
 *   CUDA_EMU_POISON=random, noise that differs by seed).
 *   A capturing stream records its work into a graph (kernel arguments by value, as at the call);
 *   a replay runs the recording. Calls that a capture forbids end it as invalidated.
 *   A kernel that faults makes the device's error sticky, as a GPU fault does. */
#include <map>
#include <mutex>
#include <set>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "emu.h"

namespace cuemu
{
namespace
{

enum { DEVICE, PINNED, PAGEABLE };

struct alloc {
    size_t bytes;
    int kind;
};

/* never destroyed: memory still allocated at exit stays reachable (a GPU frees it with the context) */
std::recursive_mutex &mu = *new std::recursive_mutex;
std::map<uintptr_t, alloc> &allocs = *new std::map<uintptr_t, alloc>;
size_t device_bytes;
std::set<cudaStream_t> &streams = *new std::set<cudaStream_t>;
std::map<const void *, int> &dyn_limits = *new std::map<const void *, int>;
cudaError_t sticky = cudaSuccess, last = cudaSuccess;
std::string sticky_why, last_why;
cudaError_t last_why_code = cudaSuccess;
uint64_t launches;

/* an error returned by a call: the last error until cudaGetLastError reads it, with its details */
cudaError_t vfail(cudaError_t e, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    last = e;
    last_why = buf;
    last_why_code = e;
    return e;
}

__attribute__((format(printf, 2, 3))) cudaError_t fail(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(e, fmt, ap);
    va_end(ap);
    return e;
}

/* the sticky error, when the device has one */
cudaError_t broken() { return sticky != cudaSuccess ? (last = sticky) : cudaSuccess; }

const alloc *find(const void *p, uintptr_t *base)
{
    uintptr_t a = (uintptr_t)p;
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin())
        return nullptr;
    --it;
    if (a >= it->first + (it->second.bytes ? it->second.bytes : 1))
        return nullptr;
    *base = it->first;
    return &it->second;
}

/* which memory [p, p + n) is in: DEVICE or PINNED when inside one such allocation, else PAGEABLE;
 * -1 (the error set) when it starts inside one and runs past its end */
int classify(const void *p, size_t n, const char *call, const char *name)
{
    uintptr_t base;
    const alloc *a = find(p, &base);
    if (!a)
        return PAGEABLE;
    if ((uintptr_t)p + n > base + a->bytes) {
        fail(cudaErrorInvalidValue,
             "%s: %s %p + %zu bytes runs %zu bytes past the end of its %s allocation of %zu", call,
             name, p, n, (size_t)((uintptr_t)p + n - base - a->bytes),
             a->kind == DEVICE ? "device" : "pinned", a->bytes);
        return -1;
    }
    return a->kind;
}

/* the copy kinds' pointer classes: what each side must be (host: pinned or pageable) */
cudaError_t check_kind(cudaMemcpyKind k, int dc, int sc, const char *call)
{
    if (dc < 0 || sc < 0)
        return last;
    bool dd = dc == DEVICE, sd = sc == DEVICE;
    bool ok = k == cudaMemcpyDefault || (k == cudaMemcpyHostToDevice && dd && !sd) ||
              (k == cudaMemcpyDeviceToHost && !dd && sd) ||
              (k == cudaMemcpyDeviceToDevice && dd && sd) ||
              (k == cudaMemcpyHostToHost && !dd && !sd);
    if (k < cudaMemcpyHostToHost || k > cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection, "%s: copy kind %d", call, (int)k);
    if (!ok)
        return fail(cudaErrorInvalidValue,
                    "%s: kind %d does not match the pointers (destination %s, source %s)", call,
                    (int)k, dd ? "device" : "host", sd ? "device" : "host");
    return cudaSuccess;
}

/* A copy of height rows of width bytes. Pageable sources are read now; a pageable destination makes
 * the call wait for everything before it and copy now (CUDA's rules for pageable memory). */
cudaError_t copy2d(void *dst, size_t dp, const void *src, size_t sp, size_t width, size_t height,
                   cudaMemcpyKind k, cudaStream_t s, bool sync, const char *call)
{
    device_guard g(mu);
    if (cudaError_t e = broken())
        return e;
    if (!valid_stream(s))
        return fail(cudaErrorInvalidResourceHandle, "%s: not a stream", call);
    if (!width || !height)
        return cudaSuccess;
    if (height > 1 &&
        (width > dp || width > sp || dp > device_prop().memPitch || sp > device_prop().memPitch))
        return fail(cudaErrorInvalidPitchValue, "%s: width %zu, pitches %zu and %zu", call, width,
                    dp, sp);
    size_t dspan = dp * (height - 1) + width, sspan = sp * (height - 1) + width;
    int dc = classify(dst, dspan, call, "destination"), sc = classify(src, sspan, call, "source");
    if (cudaError_t e = check_kind(k, dc, sc, call))
        return e;
    const char *d = (const char *)dst, *sr = (const char *)src;
    if (height > 1 && d < sr + sspan && sr < d + dspan)
        return fail(cudaErrorInvalidValue, "%s: the source and destination overlap", call);
    auto rows = [=](const char *from) {
        for (size_t r = 0; r < height; r++) {
            written_copy((char *)dst + r * dp, from + r * sp, width);
            memmove((char *)dst + r * dp, from + r * sp, width);
        }
    };
    if (sync)
        return wait_for(call, [=]() { rows(sr); });
    if (dc == PAGEABLE || sc == PAGEABLE) {
        if (s && s->capturing)
            return s->invalidated = true,
                   fail(cudaErrorStreamCaptureUnsupported,
                        "%s with pageable host memory while capturing", call);
        if (dc == PAGEABLE) { /* waits for the work before it, then copies */
            run_queued();
            if (cudaError_t e = broken())
                return e;
            rows(sr);
            return cudaSuccess;
        }
        auto snap = std::make_shared<std::vector<char>>(sr, sr + sspan);
        return enqueue(s, call, [=]() { rows(snap->data()); });
    }
    /* pinned memory is read when the copy runs; CUDA_EMU_PINNED=call (strict) reads it now: a
     * GPU's copy engine may do either, so a host that rewrites it before the wait is wrong both
     * ways */
    static const bool at_call = !strcmp(emu_mode("CUDA_EMU_PINNED", "call", "run"), "call");
    if (at_call && sc == PINNED && !(s && s->capturing)) { /* a graph's node reads at replay */
        auto snap = std::make_shared<std::vector<char>>(sr, sr + sspan);
        return enqueue(s, call, [=]() { rows(snap->data()); });
    }
    return enqueue(s, call, [=]() { rows(sr); });
}

cudaError_t set(void *p, int v, size_t n, cudaStream_t s, bool sync, const char *call)
{
    device_guard g(mu);
    if (cudaError_t e = broken())
        return e;
    if (!n)
        return cudaSuccess;
    int c = classify(p, n, call, "destination");
    if (c < 0)
        return last;
    if (c != DEVICE)
        return fail(cudaErrorInvalidValue, "%s: %p is not device memory", call, p);
    auto fill = [=]() {
        written_mark(p, n);
        memset(p, v, n);
    };
    return sync ? wait_for(call, fill) : enqueue(s, call, fill);
}

cudaError_t host_alloc(void **p, size_t bytes, const char *call)
{
    device_guard g(mu);
    if (cudaError_t e = broken())
        return e;
    if (!p)
        return fail(cudaErrorInvalidValue, "%s: no pointer to set", call);
    if (cudaError_t e = forbidden_in_capture(call))
        return e;
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return fail(cudaErrorMemoryAllocation, "%s: %zu bytes", call, bytes);
    poison(*p, bytes);
    allocs[(uintptr_t)*p] = alloc{bytes, PINNED};
    return cudaSuccess;
}

} /* namespace */

std::recursive_mutex &device_mutex() { return mu; }
std::set<cudaStream_t> &device_streams() { return streams; }
cudaError_t sticky_error() { return broken(); }
bool device_faulted() { return sticky != cudaSuccess; }
bool valid_stream(cudaStream_t s) { return !s || streams.count(s); }

cudaError_t api_fail(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(e, fmt, ap);
    va_end(ap);
    return e;
}

long env_long(const char *name, long def)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, nullptr, 0) : def;
}

const char *emu_mode(const char *var, const char *strict_value, const char *plain_value)
{
    device_guard g(mu);
    static std::map<std::string, const char *> &modes = *new std::map<std::string, const char *>;
    auto it = modes.find(var);
    if (it != modes.end())
        return it->second;
    const char *v = getenv(var);
    if (!v || !*v)
        v = env_long("CUDA_EMU_STRICT", 0) ? strict_value : plain_value;
    return modes[var] = v;
}

void poison(void *p, size_t bytes)
{
    static const bool random = !strcmp(emu_mode("CUDA_EMU_POISON", "random", "nan"), "random");
    if (!random) {
        memset(p, 0xff, bytes);
        return;
    }
    /* a splitmix64 stream; bit 6 of every 16-bit unit's high byte cleared, so that no f16, bf16,
     * f32 or f64 read from an even offset has an all-ones exponent (each is finite, under 2) */
    auto mix = [](uint64_t z) {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    /* started at a mixed seed: seeds' streams that were shifts of one another would overlap */
    static uint64_t state = mix((uint64_t)env_long("CUDA_EMU_SEED", 1) + 0x632be59bd9b4e019ull);
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t z = mix(state += 0x9e3779b97f4a7c15ull) & ~0x4000400040004000ull;
        memcpy(b + i, &z, bytes - i < 8 ? bytes - i : 8);
    }
}

const cudaDeviceProp &device_prop(void)
{
    static cudaDeviceProp p;
    static bool made;
    if (!made) {
        made = true;
        snprintf(p.name, sizeof p.name, "NVIDIA H200 (emulated by cuda-emu)");
        p.totalGlobalMem = (size_t)env_long("CUDA_EMU_MEMORY", 143771L << 20);
        p.sharedMemPerBlock = 48 << 10;
        p.sharedMemPerBlockOptin = 227 << 10;
        p.sharedMemPerMultiprocessor = 228 << 10;
        p.totalConstMem = 64 << 10;
        p.regsPerBlock = 65536;
        p.warpSize = 32;
        p.maxThreadsPerBlock = 1024;
        p.maxThreadsDim[0] = p.maxThreadsDim[1] = 1024;
        p.maxThreadsDim[2] = 64;
        p.maxGridSize[0] = 2147483647;
        p.maxGridSize[1] = p.maxGridSize[2] = 65535;
        p.major = 9;
        p.minor = 0;
        p.multiProcessorCount = 132;
        p.maxThreadsPerMultiProcessor = 2048;
        p.l2CacheSize = 60 << 20;
        p.memoryBusWidth = 6144;
        p.memoryClockRate =
            3125000; /* kHz: 2 x 3.125 GHz x 768 bytes = 4.8 TB/s, the datasheet's */
        p.clockRate = 1980000;
        p.concurrentKernels = p.unifiedAddressing = p.canMapHostMemory = p.ECCEnabled = 1;
        p.asyncEngineCount = 3;
        p.memPitch = 2147483647;
    }
    return p;
}

void device_fault(cudaError_t e, const std::string &why)
{
    if (sticky != cudaSuccess)
        return;
    sticky = e;
    sticky_why = why;
    fprintf(stderr, "cuda-emu: %s\n", why.c_str());
}

static std::mutex &objects_mu = *new std::mutex;
static std::set<const void *> &objects = *new std::set<const void *>;

void keep(const void *object)
{
    std::lock_guard<std::mutex> g(objects_mu);
    objects.insert(object);
}

void forget(const void *object)
{
    std::lock_guard<std::mutex> g(objects_mu);
    objects.erase(object);
}

bool in_device_memory(const void *p, size_t bytes)
{
    uintptr_t base;
    const alloc *a = find(p, &base);
    return a && a->kind == DEVICE && (uintptr_t)p + bytes <= base + a->bytes;
}

/* CUDA_EMU_FAULT: the first number of kernel name's output that the launch changed (before: the
 * bytes from out.p to the end of its allocation, as they were) is changed again, wrongly */
static void plant_fault(const char *name, const output_arg &out,
                        const std::vector<unsigned char> &before)
{
    const unsigned char *now = (const unsigned char *)out.p;
    for (size_t i = 0; i + out.size <= before.size(); i += out.size)
        if (memcmp(now + i, before.data() + i, out.size)) {
            out.perturb((void *)(now + i));
            static bool told;
            if (!told)
                fprintf(stderr, "cuda-emu: CUDA_EMU_FAULT: each launch of %s gets a wrong output\n",
                        name);
            told = true;
            return;
        }
}

/* The readable mappings of this process under 64 GiB (AddressSanitizer's shadow is larger), from
 * /proc/self/maps: where a host pointer can point */
static std::vector<std::pair<uintptr_t, uintptr_t>> host_mappings()
{
    std::vector<std::pair<uintptr_t, uintptr_t>> m;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], perms[8];
    unsigned long lo, hi;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[0] == 'r' &&
            hi - lo <= (64ul << 30))
            m.push_back({lo, hi});
    if (f)
        fclose(f);
    return m;
}

/* v, a word of a struct argument, points into host memory that is neither device nor pinned. A
 * word whose low half is a small number is a 4-byte field beside 4 bytes of padding, which hold
 * whatever the stack held (a real pointer is that low one time in 65536: missed, not misread). */
static bool host_pointer(uint64_t v)
{
    uintptr_t base;
    if ((v & 0xffffffffu) < 0x10000 || v >= (1ull << 47) || find((const void *)v, &base) ||
        find((const char *)v - 1, &base))
        return false;
    static std::vector<std::pair<uintptr_t, uintptr_t>> maps;
    /* words found to be numbers (a size, a count): the same ones come with every launch, and each
     * would read the mappings again; one that becomes an address later is missed */
    static std::set<uint64_t> &numbers = *new std::set<uint64_t>;
    auto mapped = [v]() {
        for (auto &r : maps)
            if (v >= r.first && v < r.second)
                return true;
        return false;
    };
    if (numbers.count(v))
        return false;
    if (mapped())
        return true;
    maps = host_mappings(); /* the heap may have grown since */
    if (mapped())
        return true;
    if (numbers.size() < 4096)
        numbers.insert(v);
    return false;
}

/* A kernel given a pointer a GPU would fault on: the launch fails, and, as the fault would, the
 * device's error stays (an illegal address) for every later call and synchronisation, so that code
 * which checks only its synchronisations sees it too */
__attribute__((format(printf, 1, 2))) static void pointer_fault(const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fail(cudaErrorIllegalAddress, "%s", why);
    device_fault(cudaErrorIllegalAddress, why);
}

void launch_kernel(const char *callee, const char *file, int line, const config &c, const void *fn,
                   std::function<void()> body, const arg_list &args, output_arg out)
{
    device_guard g(mu);
    if (broken())
        return;
    const cudaDeviceProp &p = device_prop();
    dim3 gr = c.grid, b = c.block;
    if (!gr.x || !gr.y || !gr.z || !b.x || !b.y || !b.z || gr.x > (unsigned)p.maxGridSize[0] ||
        gr.y > (unsigned)p.maxGridSize[1] || gr.z > (unsigned)p.maxGridSize[2] || b.x > 1024 ||
        b.y > 1024 || b.z > 64 || (size_t)b.x * b.y * b.z > 1024) {
        fail(cudaErrorInvalidConfiguration, "%s at %s:%d: grid (%u,%u,%u), block (%u,%u,%u)",
             callee, file, line, gr.x, gr.y, gr.z, b.x, b.y, b.z);
        return;
    }
    auto lim = dyn_limits.find(fn);
    size_t limit = lim != dyn_limits.end() ? (size_t)lim->second : p.sharedMemPerBlock;
    if (c.shared > limit) {
        fail(cudaErrorInvalidValue,
             "%s at %s:%d asks for %zu bytes of dynamic shared memory: the limit is %zu "
             "(cudaFuncSetAttribute raises "
             "it)",
             callee, file, line, c.shared, limit);
        return;
    }
    if (!valid_stream(c.stream)) {
        fail(cudaErrorInvalidResourceHandle, "%s at %s:%d: not a stream", callee, file, line);
        return;
    }
    for (int i = 0; i < args.n_pointers; i++) {
        uintptr_t base;
        const void *p = args.pointers[i];
        if (p && !find(p, &base) && !find((const char *)p - 1, &base)) {
            pointer_fault("%s at %s:%d: pointer argument %d (%p) is neither device nor pinned "
                          "memory",
                          callee, file, line, i + 1, p);
            return;
        }
    }
    /* a pointer inside a struct argument: every aligned word that points into this process's
     * memory but not into a device or pinned allocation (a GPU would fault on it) */
    for (int i = 0; i < args.n_structs; i++)
        for (size_t at = 0; at + 8 <= args.structs[i].bytes; at += 8) {
            uint64_t v;
            memcpy(&v, (const char *)args.structs[i].p + at, 8);
            if (host_pointer(v)) {
                pointer_fault("%s at %s:%d: argument %d, a struct, holds at byte %zu a pointer "
                              "(%p) into host memory that is neither device nor pinned memory",
                              callee, file, line, args.structs[i].index, at, (void *)v);
                return;
            }
        }
    auto k = std::make_shared<kernel_launch>(kernel_launch{callee, file, line, c, std::move(body)});
    std::string what = std::string("kernel ") + callee;
    enqueue(c.stream, what.c_str(), [k, out]() {
        uint64_t seed = (uint64_t)env_long("CUDA_EMU_SEED", 1) * 0x9e3779b97f4a7c15ull + ++launches;
        static const char *planted = getenv("CUDA_EMU_FAULT");
        std::vector<unsigned char> before;
        uintptr_t base;
        const alloc *a = planted && out.p ? find(out.p, &base) : nullptr;
        if (a)
            before.assign((const unsigned char *)out.p, (const unsigned char *)base + a->bytes);
        std::string why;
        const char *name = nullptr;
        if (!run_grid(*k, seed, &why, &name))
            device_fault(cudaErrorLaunchFailure, why);
        else if (a && name && !strcmp(name, planted))
            plant_fault(name, out, before);
    });
}

} /* namespace cuemu */

using namespace cuemu;

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
        /* a list of names, packed */
        /* clang-format off */
#define N(x)                                                                                       \
    case x: return #x;
        N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation)
        N(cudaErrorInitializationError) N(cudaErrorInvalidConfiguration)
        N(cudaErrorInvalidPitchValue) N(cudaErrorInvalidDevicePointer)
        N(cudaErrorInvalidMemcpyDirection) N(cudaErrorInsufficientDriver) N(cudaErrorNoDevice)
        N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorIllegalState)
        N(cudaErrorNotReady) N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources)
        N(cudaErrorAssert) N(cudaErrorLaunchFailure) N(cudaErrorStreamCaptureUnsupported)
        N(cudaErrorStreamCaptureInvalidated) N(cudaErrorStreamCaptureImplicit) N(cudaErrorUnknown)
#undef N
        /* clang-format on */
    }
    return "cudaErrorUnknown";
}

/* CUDA's text for the error, and the emulator's account of it where it has one */
const char *cudaGetErrorString(cudaError_t e)
{
    static const std::map<int, const char *> text = {
        {cudaSuccess, "no error"},
        {cudaErrorInvalidValue, "invalid argument"},
        {cudaErrorMemoryAllocation, "out of memory"},
        {cudaErrorInitializationError, "initialization error"},
        {cudaErrorInvalidConfiguration, "invalid configuration argument"},
        {cudaErrorInvalidPitchValue, "invalid pitch argument"},
        {cudaErrorInvalidDevicePointer, "invalid device pointer"},
        {cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"},
        {cudaErrorInsufficientDriver,
         "CUDA driver version is insufficient for CUDA runtime version"},
        {cudaErrorNoDevice, "no CUDA-capable device is detected"},
        {cudaErrorInvalidDevice, "invalid device ordinal"},
        {cudaErrorInvalidResourceHandle, "invalid resource handle"},
        {cudaErrorIllegalState, "the operation cannot be performed in the present state"},
        {cudaErrorNotReady, "device not ready"},
        {cudaErrorIllegalAddress, "an illegal memory access was encountered"},
        {cudaErrorLaunchOutOfResources, "too many resources requested for launch"},
        {cudaErrorAssert, "device-side assert triggered"},
        {cudaErrorLaunchFailure, "unspecified launch failure"},
        {cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"},
        {cudaErrorStreamCaptureInvalidated,
         "operation failed due to a previous error during capture"},
        {cudaErrorStreamCaptureImplicit,
         "operation would make the legacy stream depend on a capturing blocking stream"},
    };
    device_guard g(mu);
    auto it = text.find(e);
    const char *base = it != text.end() ? it->second : "unrecognized error code";
    const std::string *why = e == sticky && !sticky_why.empty() ? &sticky_why
                             : e == last_why_code               ? &last_why
                                                                : nullptr;
    if (!why || why->empty())
        return base;
    static thread_local char buf[2048];
    snprintf(buf, sizeof buf, "%s (cuda-emu: %s)", base, why->c_str());
    return buf;
}

cudaError_t cudaGetLastError(void)
{
    device_guard g(mu);
    cudaError_t e = sticky != cudaSuccess ? sticky : last;
    last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    device_guard g(mu);
    return sticky != cudaSuccess ? sticky : last;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    return d == 0 ? cudaSuccess
                  : fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): the emulated device is 0", d);
}

cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d != 0)
        return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", d);
    *p = device_prop();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    const cudaDeviceProp &p = device_prop();
    if (d != 0)
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute on device %d", d);
    switch (a) {
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrWarpSize: *v = p.warpSize; break;
        case cudaDevAttrClockRate: *v = p.clockRate; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMemoryClockRate: *v = p.memoryClockRate; break;
        case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; break;
        case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
        default:
            return fail(cudaErrorInvalidValue,
                        "cudaDeviceGetAttribute: attribute %d is not emulated", (int)a);
    }
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    device_guard g(mu);
    return wait_all("cudaDeviceSynchronize");
}

cudaError_t cudaDeviceReset(void)
{
    device_guard g(mu);
    drop_queued();
    sticky = last = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    device_guard g(mu);
    if (cudaError_t e = broken())
        return e;
    if (!p)
        return fail(cudaErrorInvalidValue, "cudaMalloc: no pointer to set");
    if (cudaError_t e = forbidden_in_capture("cudaMalloc"))
        return e;
    *p = nullptr;
    if (!bytes)
        return cudaSuccess;
    if (device_bytes + bytes > device_prop().totalGlobalMem)
        return fail(cudaErrorMemoryAllocation, "cudaMalloc: %zu bytes with %zu of %zu in use",
                    bytes, device_bytes, device_prop().totalGlobalMem);
    void *m = malloc(bytes);
    if (!m)
        return fail(cudaErrorMemoryAllocation, "cudaMalloc: the host has no %zu bytes", bytes);
    poison(m, bytes);
    written_track(m, bytes, "a device allocation");
    allocs[(uintptr_t)m] = alloc{bytes, DEVICE};
    device_bytes += bytes;
    *p = m;
    return cudaSuccess;
}

static cudaError_t release(void *p, int kind, const char *call)
{
    device_guard g(mu);
    if (!p)
        return cudaSuccess;
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end() || it->second.kind != kind)
        return fail(cudaErrorInvalidValue, "%s(%p): not a pointer that %s returned", call, p,
                    kind == DEVICE ? "cudaMalloc" : "cudaHostAlloc");
    if (cudaError_t e = wait_all(call)) /* freeing waits for the work that may still use it */
        if (e != sticky)
            return e;
    if (kind == DEVICE)
        device_bytes -= it->second.bytes;
    allocs.erase(it);
    written_untrack(p);
    free(p);
    return broken();
}

cudaError_t cudaFree(void *p) { return release(p, DEVICE, "cudaFree"); }
cudaError_t cudaFreeHost(void *p) { return release(p, PINNED, "cudaFreeHost"); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return host_alloc(p, bytes, "cudaHostAlloc");
}
cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return host_alloc(p, bytes, "cudaMallocHost");
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    device_guard g(mu);
    if (cudaError_t e = broken())
        return e;
    *total_bytes = device_prop().totalGlobalMem;
    *free_bytes = *total_bytes - device_bytes;
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    device_guard g(mu);
    uintptr_t base;
    const alloc *al = find(p, &base);
    memset(a, 0, sizeof *a);
    a->type = !al                  ? cudaMemoryTypeUnregistered
              : al->kind == DEVICE ? cudaMemoryTypeDevice
                                   : cudaMemoryTypeHost;
    a->devicePointer = al ? (void *)p : nullptr;
    a->hostPointer = al && al->kind == PINNED ? (void *)p : nullptr;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    return copy2d(dst, bytes, src, bytes, bytes, 1, k, nullptr, true, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t s)
{
    return copy2d(dst, bytes, src, bytes, bytes, 1, k, s, false, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpy2D(void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h,
                         cudaMemcpyKind k)
{
    return copy2d(dst, dp, src, sp, w, h, k, nullptr, true, "cudaMemcpy2D");
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h,
                              cudaMemcpyKind k, cudaStream_t s)
{
    return copy2d(dst, dp, src, sp, w, h, k, s, false, "cudaMemcpy2DAsync");
}
cudaError_t cudaMemset(void *p, int v, size_t bytes)
{
    return set(p, v, bytes, nullptr, true, "cudaMemset");
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s)
{
    return set(p, v, bytes, s, false, "cudaMemsetAsync");
}

cudaError_t cuemu_func_set_attribute(const void *f, cudaFuncAttribute a, int v)
{
    device_guard g(mu);
    if (a == cudaFuncAttributePreferredSharedMemoryCarveout)
        return v >= -1 && v <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue, "carveout %d", v);
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d is not emulated",
                    (int)a);
    if (v < 0 || (size_t)v > device_prop().sharedMemPerBlockOptin)
        return fail(cudaErrorInvalidValue,
                    "cudaFuncSetAttribute: %d bytes of dynamic shared memory; the most is %zu", v,
                    device_prop().sharedMemPerBlockOptin);
    dyn_limits[f] = v;
    return cudaSuccess;
}
