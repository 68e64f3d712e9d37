/* The store hooks of a program whose device code nvcc-emu compiled with --emu-switch-stores: there
 * AddressSanitizer checks each store through a call (not inline), and checks no load, so that even
 * the store of `c = c + 1` has its own call (a load's check would stand for both). Each hook tells
 * the scheduler of the store (store_point, sched.cpp) and then checks it as AddressSanitizer's own
 * function does, found behind this one. Only with AddressSanitizer (CUEMU_ASAN). */
#ifdef CUEMU_ASAN
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

#include "emu.h"

/* AddressSanitizer's own hook NAME, then ours calling it */
#define STORE_HOOK(name, params, args)                                       \
    extern "C" void name params                                              \
    {                                                                        \
        static void(*real) params = (void(*) params)dlsym(RTLD_NEXT, #name); \
        if (!real)                                                           \
            abort();                                                         \
        cuemu::store_point(p);                                               \
        real args;                                                           \
    }
STORE_HOOK(__asan_store1, (void *p), (p))
STORE_HOOK(__asan_store2, (void *p), (p))
STORE_HOOK(__asan_store4, (void *p), (p))
STORE_HOOK(__asan_store8, (void *p), (p))
STORE_HOOK(__asan_store16, (void *p), (p))
STORE_HOOK(__asan_storeN, (void *p, size_t n), (p, n))
#endif
