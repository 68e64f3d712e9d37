/* The emulated device's queue: work waits here until the host waits for it. By default it runs
 * in the order it was queued and every wait runs all of it; with CUDA_EMU_STREAMS=unordered
 * (CUDA_EMU_STRICT) streams part where nothing orders them (run_until says how). Also the rules
 * of stream capture that every queueing and waiting call follows. */
#include <string.h>

#include <functional>
#include <vector>

#include "emu.h"

namespace cuemu
{
namespace
{

/* a queued piece of work, in its stream; after: the number of an event's record it waits for (0:
 * none) */
struct queued {
    work w;
    cudaStream_t s;
    uint64_t seq, after;
};
/* never destroyed, as the device's other state (device.cpp) */
std::vector<queued> &queue = *new std::vector<queued>;
uint64_t next_seq;

bool blocking(cudaStream_t s) { return s && !(s->flags & cudaStreamNonBlocking); }

/* queue[i] may run now: nothing before it in its stream, no legacy-stream work before it when it
 * is on a blocking stream (and the reverse), and the event's record it waits for has run */
bool ready(size_t i)
{
    const queued &q = queue[i];
    for (size_t j = 0; j < i; j++) {
        const queued &p = queue[j];
        if (p.s == q.s || (!q.s && blocking(p.s)) || (blocking(q.s) && !p.s) || p.seq == q.after)
            return false;
    }
    return true; /* (a record is queued before any wait for it) */
}

bool queued_seq(uint64_t seq)
{
    for (auto &q : queue)
        if (q.seq == seq)
            return true;
    return false;
}

bool unordered()
{
    static const bool u =
        !strcmp(emu_mode("CUDA_EMU_STREAMS", "unordered", "ordered"), "unordered");
    return u;
}

/* Runs queued work until done() (NULL: until none is left). By default in the order it was
 * queued, and every wait runs everything. With CUDA_EMU_STREAMS=unordered (strict) each step runs
 * one piece of work, drawn from CUDA_EMU_SEED, among those that nothing orders after another (its
 * stream, the legacy stream's rules, events), and a wait stops once what it waits for has run: work
 * on two streams with no event between them runs in either order. After a fault the rest is
 * dropped, as a GPU drops it. */
void run_until(const std::function<bool()> &done)
{
    static uint64_t state = (uint64_t)env_long("CUDA_EMU_SEED", 1) * 0xd1b54a32d192ed03ull;
    bool u = unordered();
    while (!queue.empty() && !device_faulted() && !(u && done && done())) {
        size_t pick = 0;
        if (u) {
            std::vector<size_t> can;
            for (size_t i = 0; i < queue.size(); i++)
                if (ready(i))
                    can.push_back(i);
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            pick = can[(size_t)(state >> 33) % can.size()];
        }
        queued q = std::move(queue[pick]);
        queue.erase(queue.begin() + (long)pick);
        q.w.fn();
    }
    if (device_faulted())
        queue.clear();
}

void flush() { run_until(nullptr); }

} /* namespace */

/* the capture that a call forbidden during capture invalidates (Global and ThreadLocal modes) */
static cuemu_stream *strict_capture()
{
    for (auto s : device_streams())
        if (s->capturing && !s->invalidated && s->mode != cudaStreamCaptureModeRelaxed)
            return s;
    return nullptr;
}

cudaError_t forbidden_in_capture(const char *call)
{
    cuemu_stream *s = strict_capture();
    if (!s)
        return cudaSuccess;
    s->invalidated = true;
    return api_fail(cudaErrorStreamCaptureUnsupported,
                    "%s while a stream is capturing: the capture is invalidated", call);
}

void run_queued() { flush(); }
void drop_queued() { queue.clear(); }

/* a synchronising call's wait: forbidden while capturing, then run_until(done) */
static cudaError_t wait(const char *call, const std::function<bool()> &done)
{
    if (cudaError_t e = forbidden_in_capture(call))
        return e;
    run_until(done);
    return sticky_error();
}

cudaError_t wait_all(const char *call) { return wait(call, nullptr); }

cudaError_t wait_stream(cudaStream_t s, const char *call)
{
    return wait(call, [s]() {
        for (auto &q : queue)
            if (q.s == s)
                return false;
        return true;
    });
}

cudaError_t wait_seq(uint64_t seq, const char *call)
{
    return wait(call, [seq]() { return !queued_seq(seq); });
}

/* A synchronous copy or set: on the legacy stream, the host waiting until it has run (ordered:
 * after everything queued before it) */
cudaError_t wait_for(const char *call, std::function<void()> fn)
{
    if (cudaError_t e = forbidden_in_capture(call))
        return e;
    if (cudaError_t e = enqueue(nullptr, call, std::move(fn)))
        return e;
    return wait_seq(next_seq, call);
}

uint64_t last_queued() { return next_seq; }

cudaError_t enqueue_wait(cudaStream_t s, uint64_t seq)
{
    if (cudaError_t e = enqueue(s, "cudaStreamWaitEvent", []() {}))
        return e;
    if (!(s && s->capturing))
        queue.back().after = seq;
    return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t s, const char *what, std::function<void()> fn)
{
    device_guard g(device_mutex());
    if (s && s->capturing) {
        if (s->invalidated)
            return api_fail(cudaErrorStreamCaptureInvalidated,
                            "%s: the stream's capture was invalidated", what);
        s->graph->nodes.push_back(std::make_shared<work>(work{what, std::move(fn)}));
        return cudaSuccess;
    }
    if (!s) /* the legacy default stream waits for every stream: a capture cannot take part */
        if (cuemu_stream *c = strict_capture()) {
            c->invalidated = true;
            return api_fail(cudaErrorStreamCaptureImplicit,
                            "%s on the legacy default stream while a stream is capturing", what);
        }
    queue.push_back(queued{work{what, std::move(fn)}, s, ++next_seq, 0});
    return cudaSuccess;
}

} /* namespace cuemu */
