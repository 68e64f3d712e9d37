/* The hooks of device code that nvcc-emu compiled with --emu-trace-memory: compiled for
 * ThreadSanitizer but linked without its runtime, every load and store of a kernel (and of the host
 * code in a .cu file) calls one of these first; unlike AddressSanitizer's, these calls are never
 * merged, so the store of `c = c + 1` has its own. A load goes to load_point, a store to store_point
 * (sched.cpp): the store switch (CUDA_EMU_SWITCH=stores) and the report of never-written reads
 * (CUDA_EMU_UNINIT=report, written.cpp). Atomics the instrumented code makes (the host code's:
 * shared_ptr's counts) run as the compiler's own, sequentially consistent. */
#include <stddef.h>
#include <stdint.h>

#include "emu.h"

#define PC ((const char *)__builtin_return_address(0) - 1)
#define ACCESS(size)                                                                         \
    extern "C" void __tsan_read##size(void *p) { cuemu::load_point(p, size, PC); }           \
    extern "C" void __tsan_unaligned_read##size(void *p) { cuemu::load_point(p, size, PC); } \
    extern "C" void __tsan_write##size(void *p) { cuemu::store_point(p, size); }             \
    extern "C" void __tsan_unaligned_write##size(void *p) { cuemu::store_point(p, size); }
ACCESS(1)
ACCESS(2)
ACCESS(4)
ACCESS(8)
ACCESS(16)
extern "C" void __tsan_read_range(void *p, size_t n) { cuemu::load_point(p, n, PC); }
extern "C" void __tsan_write_range(void *p, size_t n) { cuemu::store_point(p, n); }

extern "C" void __tsan_init(void) { cuemu::trace_memory_on(); }
extern "C" void __tsan_func_entry(void *) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void **, void *) {}
extern "C" void __tsan_vptr_read(void **) {}

/* __tsan_atomicB_NAME(a, v, order): the compiler's own read-modify-write, BUILTIN */
#define RMW(bits, T, name, builtin)                                    \
    extern "C" T __tsan_atomic##bits##_##name(volatile T *a, T v, int) \
    {                                                                  \
        return builtin(a, v, __ATOMIC_SEQ_CST);                        \
    }
#define CAS(bits, T, kind, weak)                                                                \
    extern "C" int __tsan_atomic##bits##_compare_exchange_##kind(volatile T *a, T *c, T v, int, \
                                                                 int)                           \
    {                                                                                           \
        return __atomic_compare_exchange_n(a, c, v, weak, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);  \
    }
#define ATOMICS(bits, T)                                                                       \
    extern "C" T __tsan_atomic##bits##_load(const volatile T *a, int)                          \
    {                                                                                          \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                           \
    }                                                                                          \
    extern "C" void __tsan_atomic##bits##_store(volatile T *a, T v, int)                       \
    {                                                                                          \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                              \
    }                                                                                          \
    RMW(bits, T, exchange, __atomic_exchange_n)                                                \
    RMW(bits, T, fetch_add, __atomic_fetch_add)                                                \
    RMW(bits, T, fetch_sub, __atomic_fetch_sub)                                                \
    RMW(bits, T, fetch_and, __atomic_fetch_and)                                                \
    RMW(bits, T, fetch_or, __atomic_fetch_or)                                                  \
    RMW(bits, T, fetch_xor, __atomic_fetch_xor)                                                \
    CAS(bits, T, strong, false)                                                                \
    CAS(bits, T, weak, true)                                                                   \
    extern "C" T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) \
    {                                                                                          \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);      \
        return c;                                                                              \
    }
ATOMICS(8, uint8_t)
ATOMICS(16, uint16_t)
ATOMICS(32, uint32_t)
ATOMICS(64, uint64_t)
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
