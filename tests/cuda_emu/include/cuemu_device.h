/* The device side of the emulated CUDA device: the language's keywords, built-in indices, vector
 * types, warp collectives, barriers, atomics and math, as host C++ run by the emulator's fibers
 * (one per GPU thread, runtime/sched.cpp). Only what CUDA C++ defines is here; nothing is shaped to
 * our kernels. */
#ifndef CUEMU_DEVICE_H
#define CUEMU_DEVICE_H

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "the emulated CUDA device compiles .cu files as C++17 (tests/cuda_emu/nvcc-emu)"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#define __CUDA_EMU__ 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __constant__ static
#define __managed__ static

/* vector types, as CUDA's vector_types.h lays them out */
#define CUEMU_VEC2(T, N, A)             \
    struct alignas(A) N##2 { T x, y; }; \
    static inline N##2 make_##N##2(T x, T y) { return N##2 {x, y}; }
#define CUEMU_VEC4(T, N, A)                   \
    struct alignas(A) N##4 { T x, y, z, w; }; \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4 {x, y, z, w}; }
CUEMU_VEC2(float, float, 8)
CUEMU_VEC4(float, float, 16)
CUEMU_VEC2(int, int, 8)
CUEMU_VEC4(int, int, 16)
CUEMU_VEC2(unsigned, uint, 8)
CUEMU_VEC4(unsigned, uint, 16)
CUEMU_VEC2(unsigned short, ushort, 4)
CUEMU_VEC4(unsigned short, ushort, 8)
CUEMU_VEC2(double, double, 16)
#undef CUEMU_VEC2
#undef CUEMU_VEC4
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

namespace cuemu
{

/* what the running fiber sees: its thread's indices and its block's */
struct thread_ctx {
    uint3 tid;
    int lane, warp;
};
struct block_ctx {
    uint3 bid;
    dim3 bdim, gdim;
};
extern thread_ctx *cur_thread;
extern block_ctx *cur_block;

/* Inside an atomic: no fiber switch at its store (CUDA_EMU_SWITCH=stores, sched.cpp) */
extern int in_atomic;
struct atomic_section {
    atomic_section() { in_atomic++; }
    ~atomic_section() { in_atomic--; }
};

/* entry of every __global__ function (inserted by the source rewriter): its name and launch bounds
 */
void kernel_entry(const char *name, int max_threads);

/* shared memory of the running block: a declaration's own allocation (key: one per declaration), or
 * the launch's dynamic area; each sized exactly and poisoned at the block's start */
void *shared_alloc(const char *key, size_t bytes, size_t align);
void *dyn_shared(void);
template <typename T>
T &shared_var(const char *key)
{
    return *(T *)shared_alloc(key, sizeof(T), alignof(T));
}

/* barriers and warp collectives: the calling fiber waits until its partners arrive */
void syncthreads(const char *file, int line);
int syncthreads_count(const char *file, int line, int pred);
int syncthreads_and(const char *file, int line, int pred);
int syncthreads_or(const char *file, int line, int pred);
enum warp_op {
    W_SYNC,
    W_SHFL,
    W_SHFL_UP,
    W_SHFL_DOWN,
    W_SHFL_XOR,
    W_BALLOT,
    W_ANY,
    W_ALL,
    W_MATCH_ANY,
    W_MATCH_ALL,
    W_ADD,
    W_MIN,
    W_MAX,
    W_AND,
    W_OR,
    W_XOR
};
/* v (8 bytes, zero-extended) from each lane; returns this lane's result (8 bytes) */
uint64_t warp_collective(const char *file, int line, warp_op op, unsigned mask, uint64_t v, int arg,
                         int width, int is_signed, int *pred_out);
unsigned active_mask(void);
[[noreturn]] void device_trap(const char *file, int line, const char *what);

template <typename T>
static inline uint64_t bits_of(T v)
{
    static_assert(sizeof(T) <= 8, "a shuffled value is at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T>
static inline T of_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
template <typename T>
T shfl(const char *f, int l, warp_op op, unsigned mask, T v, int arg, int width = 32)
{
    return of_bits<T>(warp_collective(f, l, op, mask, bits_of(v), arg, width, 0, nullptr));
}
template <typename T>
T reduce(const char *f, int l, warp_op op, unsigned mask, T v)
{
    return of_bits<T>(warp_collective(f, l, op, mask, bits_of(v), 0, 32, (T)-1 < (T)0, nullptr));
}
template <typename T>
unsigned match_all(const char *f, int l, unsigned mask, T v, int *pred)
{
    return (unsigned)warp_collective(f, l, W_MATCH_ALL, mask, bits_of(v), 0, 32, 0, pred);
}

} /* namespace cuemu */

#define threadIdx (::cuemu::cur_thread->tid)
#define blockIdx (::cuemu::cur_block->bid)
#define blockDim (::cuemu::cur_block->bdim)
#define gridDim (::cuemu::cur_block->gdim)

static constexpr int warpSize = 32;

#define __syncthreads() ::cuemu::syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(p) ::cuemu::syncthreads_count(__FILE__, __LINE__, (p))
#define __syncthreads_and(p) ::cuemu::syncthreads_and(__FILE__, __LINE__, (p))
#define __syncthreads_or(p) ::cuemu::syncthreads_or(__FILE__, __LINE__, (p))
#define __syncwarp(...) ::cuemu::syncwarp_(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_sync(m, v, l, ...) \
    ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_SHFL, (m), (v), (l), ##__VA_ARGS__)
#define __shfl_up_sync(m, v, d, ...) \
    ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_SHFL_UP, (m), (v), (d), ##__VA_ARGS__)
#define __shfl_down_sync(m, v, d, ...) \
    ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_SHFL_DOWN, (m), (v), (d), ##__VA_ARGS__)
#define __shfl_xor_sync(m, v, x, ...) \
    ::cuemu::shfl(__FILE__, __LINE__, ::cuemu::W_SHFL_XOR, (m), (v), (x), ##__VA_ARGS__)
#define __ballot_sync(m, p)                                                                       \
    ((unsigned)::cuemu::warp_collective(__FILE__, __LINE__, ::cuemu::W_BALLOT, (m), !!(p), 0, 32, \
                                        0, nullptr))
#define __any_sync(m, p)                                                                     \
    ((int)::cuemu::warp_collective(__FILE__, __LINE__, ::cuemu::W_ANY, (m), !!(p), 0, 32, 0, \
                                   nullptr))
#define __all_sync(m, p)                                                                     \
    ((int)::cuemu::warp_collective(__FILE__, __LINE__, ::cuemu::W_ALL, (m), !!(p), 0, 32, 0, \
                                   nullptr))
#define __match_any_sync(m, v)                                                         \
    ((unsigned)::cuemu::warp_collective(__FILE__, __LINE__, ::cuemu::W_MATCH_ANY, (m), \
                                        ::cuemu::bits_of(v), 0, 32, 0, nullptr))
#define __match_all_sync(m, v, pred) ::cuemu::match_all(__FILE__, __LINE__, (m), (v), (pred))
#define __reduce_add_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_ADD, (m), (v))
#define __reduce_min_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_MIN, (m), (v))
#define __reduce_max_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_MAX, (m), (v))
#define __reduce_and_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_AND, (m), (v))
#define __reduce_or_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_OR, (m), (v))
#define __reduce_xor_sync(m, v) ::cuemu::reduce(__FILE__, __LINE__, ::cuemu::W_XOR, (m), (v))
#define __activemask() ::cuemu::active_mask()
#define __trap() ::cuemu::device_trap(__FILE__, __LINE__, "__trap()")

namespace cuemu
{
static inline void syncwarp_(const char *f, int l, unsigned mask = 0xffffffffu)
{
    warp_collective(f, l, W_SYNC, mask, 0, 0, 32, 0, nullptr);
}
} /* namespace cuemu */

/* The fences order memory for other threads; the emulator runs one fiber at a time with
 * sequentially consistent memory, so they have nothing to do (a missing fence is one of the things
 * only a GPU shows). */
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}
static inline void __threadfence_system(void) {}

/* Loads through the read-only or L2-only paths: plain loads here. */
template <typename T>
static inline T __ldg(const T *p)
{
    return *p;
}
template <typename T>
static inline T __ldcg(const T *p)
{
    return *p;
}
template <typename T>
static inline T __ldca(const T *p)
{
    return *p;
}
template <typename T>
static inline T __ldcs(const T *p)
{
    return *p;
}
template <typename T>
static inline T __ldlu(const T *p)
{
    return *p;
}
template <typename T>
static inline T __ldcv(const T *p)
{
    return *p;
}
template <typename T>
static inline void __stcg(T *p, T v)
{
    *p = v;
}
template <typename T>
static inline void __stcs(T *p, T v)
{
    *p = v;
}
template <typename T>
static inline void __stwb(T *p, T v)
{
    *p = v;
}

/* Atomics: one fiber runs at a time and none is switched out inside these (not even at a store,
 * under CUDA_EMU_SWITCH=stores), so a plain read-modify-write is atomic. */
template <typename T>
static inline T atomicAdd(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = (T)(o + v);
    return o;
}
template <typename T>
static inline T atomicSub(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = (T)(o - v);
    return o;
}
template <typename T>
static inline T atomicExch(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = v;
    return o;
}
template <typename T>
static inline T atomicMin(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = v < o ? v : o;
    return o;
}
template <typename T>
static inline T atomicMax(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = v > o ? v : o;
    return o;
}
template <typename T>
static inline T atomicAnd(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = o & v;
    return o;
}
template <typename T>
static inline T atomicOr(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = o | v;
    return o;
}
template <typename T>
static inline T atomicXor(T *p, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    *p = o ^ v;
    return o;
}
template <typename T>
static inline T atomicCAS(T *p, T cmp, T v)
{
    ::cuemu::atomic_section a_;
    T o = *p;
    if (o == cmp)
        *p = v;
    return o;
}
static inline unsigned atomicInc(unsigned *p, unsigned v)
{
    ::cuemu::atomic_section a_;
    unsigned o = *p;
    *p = o >= v ? 0 : o + 1;
    return o;
}
static inline unsigned atomicDec(unsigned *p, unsigned v)
{
    ::cuemu::atomic_section a_;
    unsigned o = *p;
    *p = (o == 0 || o > v) ? v : o - 1;
    return o;
}

/* integer intrinsics */
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
static inline int __ffs(int v) { return __builtin_ffs(v); }
static inline int __ffsll(long long v) { return __builtin_ffsll(v); }
static inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
static inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
static inline unsigned __brev(unsigned v)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++)
        r |= ((v >> i) & 1u) << (31 - i);
    return r;
}
static inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b)
{
    return (unsigned)(((unsigned long long)a * b) >> 32);
}
/* four signed byte products summed onto c */
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c)
{
    for (int i = 0; i < 4; i++)
        c += ((a >> (8 * i)) & 255u) * ((b >> (8 * i)) & 255u);
    return c;
}

/* reinterpretations */
static inline float __int_as_float(int v)
{
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static inline float __uint_as_float(unsigned v)
{
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static inline int __float_as_int(float f)
{
    int v;
    memcpy(&v, &f, 4);
    return v;
}
static inline unsigned __float_as_uint(float f)
{
    unsigned v;
    memcpy(&v, &f, 4);
    return v;
}
static inline double __longlong_as_double(long long v)
{
    double d;
    memcpy(&d, &v, 8);
    return d;
}
static inline long long __double_as_longlong(double d)
{
    long long v;
    memcpy(&v, &d, 8);
    return v;
}

/* The intrinsic math functions are approximations on a GPU (ex2.approx and the like); here they are
 * the correctly rounded library functions: their error on a GPU is one of the things only it shows.
 */
/* glibc declares these names itself: macros, defined after <math.h> */
#define __expf(x) expf(x)
#define __exp10f(x) exp10f(x)
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf(x, y)
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __saturatef(float x) { return x != x ? 0.0f : x < 0 ? 0.0f : x > 1 ? 1.0f : x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline int __float2int_rn(float x) { return (int)rintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline unsigned __float2uint_rn(float x) { return (unsigned)rintf(x); }
static inline float __int2float_rn(int v) { return (float)v; }

/* CUDA's min and max overloads for host and device code */
#define CUEMU_MINMAX(T)                                     \
    static inline T min(T a, T b) { return a < b ? a : b; } \
    static inline T max(T a, T b) { return a > b ? a : b; }
CUEMU_MINMAX(int)
CUEMU_MINMAX(unsigned)
CUEMU_MINMAX(long)
CUEMU_MINMAX(unsigned long)
CUEMU_MINMAX(long long)
CUEMU_MINMAX(unsigned long long)
#undef CUEMU_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

#endif
