/* The emulated device's threads: every GPU thread of a block is a fiber with a stack of its own,
 * switched by hand (a few instructions, not a system call). A fiber runs until it reaches a barrier
 * or a warp collective, or exits; the scheduler then runs the next. Fibers that are ready run in
 * rounds, each round in an order shuffled from the seed, so code that reads what another thread
 * writes without a barrier between them sees a different result under some seed. A warp collective
 * completes when every non-exited lane its mask names has reached one with the same mask; a barrier
 * when every non-exited thread of the block waits at the same one. What can then never complete is
 * an error that names the kernel, the thread and the line: never a hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>

#include <stdarg.h>
#include <vector>

#include "emu.h"

/* CUEMU_ASAN: the program is built with AddressSanitizer (nvcc-emu says so), which must be told of
 * each switch of stacks */
#ifdef CUEMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#error "the emulated device's fibers switch with x86-64 code"
#endif

/* saves the callee-saved registers and the floating-point control words on the current stack,
 * stores its pointer in *save and continues on the stack `to` saved the same way */
extern "C" void cuemu_switch(void **save, void *to);
asm(R"(
    .text
    .globl cuemu_switch
    .type cuemu_switch, @function
cuemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuemu_switch, .-cuemu_switch
)");

namespace cuemu
{

thread_ctx *cur_thread;
block_ctx *cur_block;
int in_atomic;

namespace
{

enum fstate { F_READY, F_AT_BARRIER, F_AT_WARP, F_EXITED };
enum { BAR_PLAIN, BAR_COUNT, BAR_AND, BAR_OR };

struct fiber {
    thread_ctx ctx;
    void *sp;
    fstate st;
    const char *file; /* where it waits */
    int line;
    int op; /* warp_op, or the barrier's kind */
    unsigned mask;
    uint64_t val, result;
    int arg, width, is_signed, pred_out;
    void *fake_stack;
    char *stack;
};

/* a warp's lanes that have not exited, and those waiting in a collective */
struct warp_state {
    unsigned live, waiting;
};

struct shared_var_alloc {
    const char *key;
    void *p;
};

struct block_run {
    block_ctx ctx;
    const kernel_launch *k;
    const char *kernel; /* the __global__ function's name, once a thread has entered it */
    int n, alive;
    fiber *f;
    std::vector<warp_state> warps;
    std::vector<int> ready, round;
    size_t pos; /* the running fiber's place in round */
    std::vector<shared_var_alloc> shared;
    size_t shared_bytes;
    void *dyn;
    bool failed;
    std::string why;
    uint64_t rng;
    void *sched_sp;
    void *sched_fake;
};

enum { STACK_BYTES = 256 << 10, GUARD_BYTES = 4096 };

/* One block runs at a time, on whichever host thread holds the device's lock (device.cpp): the
 * running block and fiber are plain globals (thread_local ones trip a GCC bug under
 * -fsanitize=null). */
block_run *cur_run;
fiber *cur_fib;
std::vector<fiber> fibers;
std::vector<char *> stacks; /* each with a guard page below it */
#ifdef CUEMU_ASAN
const void *sched_bottom;
size_t sched_size;
#endif

uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

template <typename T>
void shuffle(std::vector<T> &v, uint64_t *s)
{
    for (size_t i = v.size(); i > 1; i--)
        std::swap(v[i - 1], v[next_random(s) % i]);
}

const char *op_name(int op)
{
    static const char *names[] = {
        "__syncwarp",        "__shfl_sync",       "__shfl_up_sync",    "__shfl_down_sync",
        "__shfl_xor_sync",   "__ballot_sync",     "__any_sync",        "__all_sync",
        "__match_any_sync",  "__match_all_sync",  "__reduce_add_sync", "__reduce_min_sync",
        "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync",  "__reduce_xor_sync"};
    return op >= 0 && op < (int)(sizeof names / sizeof names[0]) ? names[op] : "a warp collective";
}

/* the first error of a block wins; the scheduler abandons the block when it sees it */
__attribute__((format(printf, 2, 3))) void fault(block_run *r, const char *fmt, ...)
{
    if (r->failed)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    r->failed = true;
    r->why = buf;
}

std::string thread_name(const fiber &f)
{
    char b[64];
    snprintf(b, sizeof b, "thread (%u,%u,%u)", f.ctx.tid.x, f.ctx.tid.y, f.ctx.tid.z);
    return b;
}

fiber *lane_fiber(block_run *r, int warp, int lane)
{
    int t = warp * 32 + lane;
    return t < r->n ? &r->f[t] : nullptr;
}

/* why lane `lane` of warp `warp` is no partner in a collective over `mask` */
std::string absent_reason(block_run *r, int warp, int lane, unsigned mask)
{
    fiber *g = lane_fiber(r, warp, lane);
    char b[256];
    if (!g)
        snprintf(b, sizeof b, "lane %d does not exist (the block has %d threads)", lane, r->n);
    else if (g->st == F_EXITED)
        snprintf(b, sizeof b, "lane %d has exited", lane);
    else if (!(mask >> lane & 1u))
        snprintf(b, sizeof b, "lane %d is not in the mask 0x%08x", lane, mask);
    else
        snprintf(b, sizeof b, "lane %d is elsewhere", lane);
    return b;
}

uint64_t reduce32(int op, uint64_t acc, uint64_t v, int is_signed)
{
    uint32_t a = (uint32_t)acc, b = (uint32_t)v;
    switch (op) {
        case W_ADD: return (uint32_t)(a + b);
        case W_MIN:
            return is_signed ? (uint32_t)((int32_t)a < (int32_t)b ? a : b) : (a < b ? a : b);
        case W_MAX:
            return is_signed ? (uint32_t)((int32_t)a > (int32_t)b ? a : b) : (a > b ? a : b);
        case W_AND: return a & b;
        case W_OR: return a | b;
        default: return a ^ b;
    }
}

/* the source lane of a shuffle by CUDA's rules: out of the lane's width-wide segment, its own value
 */
int shuffle_source(const fiber &g, int lane)
{
    int w = g.width, base = lane & ~(w - 1);
    switch (g.op) {
        case W_SHFL: return base + (g.arg & (w - 1));
        case W_SHFL_UP: return lane - g.arg < base ? lane : lane - g.arg;
        case W_SHFL_DOWN: return lane + g.arg >= base + w ? lane : lane + g.arg;
        default: {
            int s = lane ^ g.arg;
            return s >= base + w ? lane : s;
        }
    }
}

/* Completes the collective over `mask` of warp `warp` if every non-exited lane it names waits at
 * one with the same mask and operation: each gets its result and becomes ready. */
void try_complete(block_run *r, int warp, unsigned mask, int op)
{
    warp_state &w = r->warps[(size_t)warp];
    if (mask & w.live & ~w.waiting)
        return; /* a lane it names has still to arrive */
    fiber *lanes = r->f + (size_t)warp * 32;
    unsigned part = mask & w.live;
    for (unsigned m = part; m; m &= m - 1) {
        const fiber &g = lanes[__builtin_ctz(m)];
        if (g.mask != mask || g.op != op)
            return;
    }
    if (!part)
        return;
    uint64_t ballot = 0, reduced = 0, first_val = lanes[__builtin_ctz(part)].val;
    int all_equal = 1;
    if (op >= W_BALLOT) {
        reduced = (uint32_t)first_val;
        for (unsigned m = part; m; m &= m - 1) {
            const fiber &g = lanes[__builtin_ctz(m)];
            ballot |= (uint64_t)(g.val != 0) << __builtin_ctz(m);
            if (m != part)
                reduced = reduce32(op, reduced, g.val, g.is_signed);
            all_equal &= g.val == first_val;
        }
    }
    for (unsigned m = part; m; m &= m - 1) {
        int l = __builtin_ctz(m);
        fiber &g = lanes[l];
        switch (op) {
            case W_SYNC: g.result = 0; break;
            case W_SHFL:
            case W_SHFL_UP:
            case W_SHFL_DOWN:
            case W_SHFL_XOR: {
                int src = shuffle_source(g, l);
                if (src != l && !(part >> src & 1u)) {
                    fault(r,
                          "%s at %s:%d: %s of warp %d reads lane %d, whose value is undefined: %s",
                          op_name(op), g.file, g.line, thread_name(g).c_str(), warp, src,
                          absent_reason(r, warp, src, mask).c_str());
                    return;
                }
                g.result = lanes[src].val;
                break;
            }
            case W_BALLOT: g.result = ballot; break;
            case W_ANY: g.result = ballot != 0; break;
            case W_ALL: g.result = ballot == part; break;
            case W_MATCH_ANY: {
                unsigned same = 0;
                for (unsigned q = part; q; q &= q - 1)
                    if (lanes[__builtin_ctz(q)].val == g.val)
                        same |= 1u << __builtin_ctz(q);
                g.result = same;
                break;
            }
            case W_MATCH_ALL:
                g.result = all_equal ? part : 0;
                g.pred_out = all_equal;
                break;
            default: g.result = reduced; break;
        }
    }
    for (unsigned m = part; m; m &= m - 1) {
        lanes[__builtin_ctz(m)].st = F_READY;
        r->ready.push_back(warp * 32 + __builtin_ctz(m));
    }
    w.waiting &= ~part;
}

/* after lane exits: the collectives its warp waits in may complete without it */
void after_exit(block_run *r, int warp, int lane)
{
    warp_state &w = r->warps[(size_t)warp];
    w.live &= ~(1u << lane);
    for (unsigned m = w.waiting; m && !r->failed; m &= m - 1) {
        fiber *g = r->f + (size_t)warp * 32 + __builtin_ctz(m);
        if (g->st == F_AT_WARP)
            try_complete(r, warp, g->mask, g->op);
    }
}

/* Leaves the running fiber (dying: for good) for the next fiber of the round, or for the scheduler
 * when the round is over: one switch, not two. */
void switch_away(fiber *f, bool dying)
{
    block_run *r = cur_run;
    void *to = r->sched_sp;
    fiber *next = nullptr;
    if (!r->failed && r->pos + 1 < r->round.size()) {
        next = &r->f[r->round[++r->pos]];
        to = next->sp;
    }
    cur_fib = next;
    cur_thread = next ? &next->ctx : nullptr;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(dying ? nullptr : &f->fake_stack,
                                   next ? next->stack : sched_bottom,
                                   next ? (size_t)STACK_BYTES : sched_size);
#endif
    (void)dying;
    cuemu_switch(&f->sp, to);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, nullptr, nullptr);
#endif
}

/* the running fiber, after a fault, leaves for good: the scheduler abandons its block */
[[noreturn]] void fail_here(fiber *f)
{
    switch_away(f, true);
    abort(); /* never resumed */
}

/* Every fiber starts here. Not instrumented: its frame lives on a stack that is reused without the
 * frame ever returning. */
__attribute__((no_sanitize_address)) void fiber_main()
{
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    block_run *r = cur_run;
    fiber *f = cur_fib;
    r->k->body();
    f->st = F_EXITED;
    r->alive--;
    after_exit(r, f->ctx.warp, f->ctx.lane);
    switch_away(f, true);
    abort();
}

char *stack_of(size_t i)
{
    while (stacks.size() <= i) {
        void *m = mmap(nullptr, STACK_BYTES + GUARD_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "cuda-emu: cannot map a fiber's stack\n");
            abort();
        }
        mprotect(m, GUARD_BYTES,
                 PROT_NONE); /* a fiber that overflows its stack faults, not corrupts */
        stacks.push_back((char *)m + GUARD_BYTES);
    }
    return stacks[i];
}

/* the stack as a fresh call of fiber_main would find it after cuemu_switch's pops; csr: the
 * floating-point control words it starts with */
void start_fiber(fiber *f, size_t i, uint64_t csr)
{
    f->stack = stack_of(i);
    void **sp = (void **)(f->stack + STACK_BYTES - 72);
    memcpy(&sp[0], &csr, 8);
    for (int k = 1; k <= 6; k++)
        sp[k] = nullptr;
    sp[7] = (void *)fiber_main;
    sp[8] = nullptr;
    f->sp = sp;
    f->st = F_READY;
    f->fake_stack = nullptr;
}

/* runs the round's fibers, each handing over to the next, until the last hands back */
void run_round(block_run *r)
{
    r->pos = 0;
    fiber *f = &r->f[r->round[0]];
    cur_fib = f;
    cur_thread = &f->ctx;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&r->sched_fake, f->stack, STACK_BYTES);
#endif
    cuemu_switch(&r->sched_sp, f->sp);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(r->sched_fake, nullptr, nullptr);
#endif
    cur_fib = nullptr;
    cur_thread = nullptr;
}

/* No fiber can run: a barrier that every non-exited thread waits at completes; anything else is a
 * deadlock on a GPU (or undefined behaviour), reported as the error it is. */
void resolve_stuck(block_run *r)
{
    fiber *bar = nullptr;
    for (int t = 0; t < r->n; t++) {
        fiber *g = &r->f[t];
        if (g->st == F_AT_WARP) {
            for (int l = 0; l < 32; l++) {
                fiber *h = g->mask >> l & 1u ? lane_fiber(r, g->ctx.warp, l) : nullptr;
                if (!h || h->st == F_EXITED ||
                    (h->st == F_AT_WARP && h->mask == g->mask && h->op == g->op))
                    continue;
                char where[256];
                if (h->st == F_AT_BARRIER)
                    snprintf(where, sizeof where, "lane %d waits at __syncthreads at %s:%d", l,
                             h->file, h->line);
                else
                    snprintf(where, sizeof where, "lane %d waits at %s at %s:%d with mask 0x%08x",
                             l, op_name(h->op), h->file, h->line, h->mask);
                fault(r, "%s at %s:%d (%s of warp %d, mask 0x%08x) can never complete: %s",
                      op_name(g->op), g->file, g->line, thread_name(*g).c_str(), g->ctx.warp,
                      g->mask, where);
                return;
            }
        }
        if (g->st == F_AT_BARRIER) {
            if (!bar)
                bar = g;
            else if (g->line != bar->line || strcmp(g->file, bar->file)) {
                fault(r, "__syncthreads in divergent code: %s waits at %s:%d, %s at %s:%d",
                      thread_name(*bar).c_str(), bar->file, bar->line, thread_name(*g).c_str(),
                      g->file, g->line);
                return;
            }
            if (g->op != bar->op) {
                fault(r, "__syncthreads at %s:%d: threads wait in different barrier functions",
                      g->file, g->line);
                return;
            }
        }
    }
    if (!bar)
        return;
    uint64_t count = 0;
    int waiting = 0;
    for (int t = 0; t < r->n; t++)
        if (r->f[t].st == F_AT_BARRIER) {
            count += r->f[t].val != 0;
            waiting++;
        }
    for (int t = 0; t < r->n; t++) {
        fiber *g = &r->f[t];
        if (g->st != F_AT_BARRIER)
            continue;
        g->result = g->op == BAR_COUNT ? count
                    : g->op == BAR_AND ? count == (uint64_t)waiting
                                       : count != 0;
        g->st = F_READY;
        r->ready.push_back(t);
    }
}

bool run_block(block_run *r, uint64_t csr)
{
    r->warps.assign((size_t)(r->n + 31) / 32, warp_state{0, 0});
    for (int t = 0; t < r->n; t++)
        r->warps[(size_t)t / 32].live |= 1u << (t % 32);
    for (int t = 0; t < r->n; t++) {
        start_fiber(&r->f[t], (size_t)t, csr);
        r->ready.push_back(t);
    }
    while (!r->failed && r->alive > 0) {
        if (r->ready.empty()) {
            resolve_stuck(r);
            if (r->ready.empty() && !r->failed)
                fault(r, "no thread can go on (an internal error of the emulator)");
            continue;
        }
        shuffle(r->ready, &r->rng);
        r->round.swap(r->ready);
        run_round(r);
        r->round.clear();
    }
    return !r->failed;
}

void free_shared(block_run *r)
{
    for (auto &s : r->shared) {
        written_untrack(s.p);
        free(s.p);
    }
    r->shared.clear();
    written_untrack(r->dyn);
    free(r->dyn);
    r->dyn = nullptr;
}

/* an abandoned block leaves frames whose shadow memory says poisoned on the stacks it used */
void clean_stacks(int n)
{
#ifdef CUEMU_ASAN
    for (int i = 0; i < n; i++)
        __asan_unpoison_memory_region(stack_of((size_t)i), STACK_BYTES);
#else
    (void)n;
#endif
}

fiber *current(const char *what)
{
    if (!cur_fib || !cur_run) {
        fprintf(stderr, "cuda-emu: %s called outside a kernel\n", what);
        abort();
    }
    return cur_fib;
}

} /* namespace */

void kernel_entry(const char *name, int max_threads)
{
    fiber *f = current("a kernel");
    block_run *r = cur_run;
    r->kernel = name;
    if (max_threads > 0 && r->n > max_threads) {
        fault(r, "launched with %d threads a block, more than its __launch_bounds__(%d) allows",
              r->n, max_threads);
        fail_here(f);
    }
}

void *shared_alloc(const char *key, size_t bytes, size_t align)
{
    fiber *f = current("a __shared__ declaration");
    block_run *r = cur_run;
    for (auto &s : r->shared)
        if (s.key == key)
            return s.p;
    for (auto &s : r->shared) /* the same declaration's key, as another copy of the string */
        if (!strcmp(s.key, key))
            return s.p;
    if (r->shared_bytes + bytes > device_prop().sharedMemPerBlock) { /* a compile-time limit */
        fault(r,
              "%zu bytes of static shared memory a block: ptxas refuses more than %zu (beyond "
              "that, dynamic shared memory and cudaFuncSetAttribute)",
              r->shared_bytes + bytes, device_prop().sharedMemPerBlock);
        fail_here(f);
    }
    size_t limit = device_prop().sharedMemPerBlockOptin;
    if (r->shared_bytes + bytes + r->k->cfg.shared > limit) {
        fault(r, "%zu bytes of static and %zu of dynamic shared memory a block: the device has %zu",
              r->shared_bytes + bytes, r->k->cfg.shared, limit);
        fail_here(f);
    }
    /* exactly the size asked for, so AddressSanitizer sees a step past its end */
    void *p = align <= 16 ? malloc(bytes ? bytes : 1)
                          : aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!p) {
        fault(r, "out of host memory for shared memory");
        fail_here(f);
    }
    poison(p, bytes); /* never-written shared memory reads as NaN (or -1), or noise */
    written_track(p, bytes, "a __shared__ array");
    r->shared.push_back({key, p});
    r->shared_bytes += bytes;
    return p;
}

void *dyn_shared(void)
{
    current("extern __shared__");
    return cur_run->dyn;
}

void store_point(const void *p, size_t n)
{
    static const bool on = !strcmp(emu_mode("CUDA_EMU_SWITCH", "stores", "none"), "stores");
    fiber *f = cur_fib;
    if (!f || ((const char *)p >= f->stack && (const char *)p < f->stack + STACK_BYTES))
        return;
    written_mark(p, n);
    if (!on || in_atomic)
        return;
    block_run *r = cur_run;
    r->ready.push_back((int)(f - r->f)); /* it goes on in the next round, whose order is drawn */
    switch_away(f, false);
}

void load_point(const void *p, size_t n, const char *pc)
{
    fiber *f = cur_fib;
    char why[256], where[512] = ""; /* no std::string: fail_here leaves this frame for good */
    if (!f || ((const char *)p >= f->stack && (const char *)p < f->stack + STACK_BYTES) ||
        written_check(p, n, why, sizeof why))
        return;
#ifdef CUEMU_ASAN
    /* the frames, innermost first, each ended by a NUL (an inlined function's line, then its
     * caller's): joined, so that an atomic's header line also names the kernel's */
    char frames[512] = "";
    __sanitizer_symbolize_pc((void *)pc, "%s:%l", frames, sizeof frames - 1);
    for (const char *fr = frames; *fr && fr < frames + sizeof frames - 1; fr += strlen(fr) + 1)
        snprintf(where + strlen(where), sizeof where - strlen(where), "%s%s",
                 *where ? ", inlined at " : "", fr);
#else
    snprintf(where, sizeof where, "%p", (const void *)pc);
#endif
    fault(cur_run, "a read of %zu bytes at %s in %s: %s (CUDA_EMU_UNINIT=report)", n, where,
          thread_name(*f).c_str(), why);
    fail_here(f);
}

static uint64_t barrier_wait(const char *file, int line, int kind, int pred)
{
    fiber *f = current("__syncthreads");
    f->st = F_AT_BARRIER;
    f->file = file;
    f->line = line;
    f->op = kind;
    f->val = pred != 0;
    switch_away(f, false);
    return f->result;
}

void syncthreads(const char *file, int line) { barrier_wait(file, line, BAR_PLAIN, 0); }
int syncthreads_count(const char *file, int line, int pred)
{
    return (int)barrier_wait(file, line, BAR_COUNT, pred);
}
int syncthreads_and(const char *file, int line, int pred)
{
    return (int)barrier_wait(file, line, BAR_AND, pred);
}
int syncthreads_or(const char *file, int line, int pred)
{
    return (int)barrier_wait(file, line, BAR_OR, pred);
}

uint64_t warp_collective(const char *file, int line, warp_op op, unsigned mask, uint64_t v, int arg,
                         int width, int is_signed, int *pred_out)
{
    fiber *f = current(op_name(op));
    block_run *r = cur_run;
    int lane = f->ctx.lane;
    if (!(mask >> lane & 1u)) {
        fault(r, "%s at %s:%d: %s (lane %d) calls it with the mask 0x%08x, which does not name it",
              op_name(op), file, line, thread_name(*f).c_str(), lane, mask);
        fail_here(f);
    }
    if (width < 1 || width > 32 || (width & (width - 1))) {
        fault(r, "%s at %s:%d: width %d is not a power of two from 1 to 32", op_name(op), file,
              line, width);
        fail_here(f);
    }
    f->st = F_AT_WARP;
    f->file = file;
    f->line = line;
    f->op = op;
    f->mask = mask;
    f->val = v;
    f->arg = arg;
    f->width = width;
    f->is_signed = is_signed;
    r->warps[(size_t)f->ctx.warp].waiting |= 1u << lane;
    try_complete(r, f->ctx.warp, mask, op);
    switch_away(f, false);
    if (pred_out)
        *pred_out = f->pred_out;
    return f->result;
}

unsigned active_mask(void)
{
    fiber *f = current("__activemask");
    unsigned m = 0;
    for (int l = 0; l < 32; l++) {
        fiber *g = lane_fiber(cur_run, f->ctx.warp, l);
        if (g && g->st != F_EXITED)
            m |= 1u << l;
    }
    return m;
}

void device_trap(const char *file, int line, const char *what)
{
    fiber *f = current(what);
    fault(cur_run, "%s at %s:%d in %s", what, file, line, thread_name(*f).c_str());
    fail_here(f);
}

bool run_grid(const kernel_launch &k, uint64_t seed, std::string *why, const char **name)
{
    const dim3 g = k.cfg.grid, b = k.cfg.block;
    int n = (int)(b.x * b.y * b.z);
    size_t blocks = (size_t)g.x * g.y * g.z;
    if (fibers.size() < (size_t)n)
        fibers.resize((size_t)n);
    std::vector<size_t> order(blocks);
    for (size_t i = 0; i < blocks; i++)
        order[i] = i;
    uint64_t rng = seed;
    shuffle(order, &rng);
    unsigned csr[2] = {0, 0x37f}; /* the fibers start with this thread's MXCSR and x87's default */
    asm volatile("stmxcsr %0" : "=m"(csr[0]));
    uint64_t csr64;
    memcpy(&csr64, csr, 8);
#ifdef CUEMU_ASAN
    /* the stack the scheduler runs on, this host thread's (read once: it reads /proc) */
    static thread_local void *bottom;
    static thread_local size_t size;
    pthread_attr_t at;
    if (!bottom && !pthread_getattr_np(pthread_self(), &at)) {
        pthread_attr_getstack(&at, &bottom, &size);
        pthread_attr_destroy(&at);
    }
    sched_bottom = bottom;
    sched_size = size;
#endif
    block_run r;
    r.k = &k;
    r.n = n;
    r.f = fibers.data();
    r.ctx.bdim = b;
    r.ctx.gdim = g;
    for (int t = 0; t < n; t++) {
        fiber &f = r.f[t];
        f.ctx.tid = uint3{(unsigned)t % b.x, (unsigned)t / b.x % b.y, (unsigned)t / (b.x * b.y)};
        f.ctx.lane = t % 32;
        f.ctx.warp = t / 32;
    }
    for (size_t i = 0; i < blocks; i++) {
        size_t id = order[i];
        r.ctx.bid = uint3{(unsigned)(id % g.x), (unsigned)(id / g.x % g.y),
                          (unsigned)(id / ((size_t)g.x * g.y))};
        r.kernel = nullptr;
        r.alive = n;
        r.ready.clear();
        r.round.clear();
        r.shared_bytes = 0;
        r.failed = false;
        r.rng = next_random(&rng);
        r.dyn = malloc(k.cfg.shared); /* exactly the bytes asked for (none: any access is past
                                         them), poisoned */
        if (r.dyn) {
            poison(r.dyn, k.cfg.shared);
            written_track(r.dyn, k.cfg.shared, "dynamic shared memory");
        } else if (k.cfg.shared)
            fault(&r, "out of host memory for dynamic shared memory");
        cur_run = &r;
        cur_block = &r.ctx;
        bool ok = !r.failed && run_block(&r, csr64);
        cur_run = nullptr;
        cur_block = nullptr;
        free_shared(&r);
        if (r.kernel)
            *name = r.kernel;
        if (!ok) {
            char head[512];
            snprintf(head, sizeof head, "kernel %s (launched as %s at %s:%d), block (%u,%u,%u): ",
                     r.kernel ? r.kernel : k.callee.c_str(), k.callee.c_str(), k.file, k.line,
                     r.ctx.bid.x, r.ctx.bid.y, r.ctx.bid.z);
            *why = head + r.why;
            clean_stacks(n);
            return false;
        }
    }
    return true;
}

} /* namespace cuemu */
