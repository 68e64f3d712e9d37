/* Streams, events, stream capture and graphs of the emulated device. Every stream shares the one
 * queue of device.cpp, in the order of the calls, which keeps every order CUDA promises. A
 * capturing stream records its work into a graph instead; an instantiated graph is a copy of those
 * nodes, and a launch queues them as one piece of work. */
#include <chrono>

#include "emu.h"

using namespace cuemu;

static double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    device_guard g(device_mutex());
    if (cudaError_t e = sticky_error())
        return e;
    *s = new cuemu_stream{flags, false, false, cudaStreamCaptureModeGlobal, nullptr};
    device_streams().insert(*s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    device_guard g(device_mutex());
    if (!s || !device_streams().count(s))
        return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a stream");
    if (s->capturing)
        return api_fail(cudaErrorIllegalState, "cudaStreamDestroy: the stream is capturing");
    run_queued();
    device_streams().erase(s);
    delete s;
    return sticky_error();
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    device_guard g(device_mutex());
    if (!valid_stream(s))
        return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a stream");
    if (s && s->capturing) {
        s->invalidated = true;
        return api_fail(cudaErrorStreamCaptureUnsupported,
                        "cudaStreamSynchronize of a capturing stream");
    }
    return wait_stream(s, "cudaStreamSynchronize");
}

/* no work runs until the host waits: a query waits, or a program that polls would never see it done
 */
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    device_guard g(device_mutex());
    if (!valid_stream(s) || !e)
        return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent");
    if (cudaError_t err = sticky_error())
        return err;
    /* a capture records its own order; an event never recorded, or whose record has run, is no
     * wait */
    return s && s->capturing ? cudaSuccess : enqueue_wait(s, e->s->seq);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    device_guard g(device_mutex());
    if (cudaError_t e = sticky_error())
        return e;
    if (!s)
        return api_fail(cudaErrorStreamCaptureUnsupported,
                        "cudaStreamBeginCapture: the legacy default stream");
    if (!device_streams().count(s))
        return api_fail(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: not a stream");
    if (s->capturing)
        return api_fail(cudaErrorIllegalState,
                        "cudaStreamBeginCapture: the stream is capturing already");
    s->capturing = true;
    s->invalidated = false;
    s->mode = mode;
    s->graph = new cuemu_graph;
    keep(s->graph);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    device_guard g(device_mutex());
    *graph = nullptr;
    if (!s || !device_streams().count(s) || !s->capturing)
        return api_fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    s->capturing = false;
    if (s->invalidated) {
        forget(s->graph);
        delete s->graph;
        s->graph = nullptr;
        return api_fail(cudaErrorStreamCaptureInvalidated,
                        "cudaStreamEndCapture: the capture was invalidated");
    }
    *graph = s->graph;
    s->graph = nullptr;
    return sticky_error();
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st)
{
    device_guard g(device_mutex());
    *st = s && s->capturing ? (s->invalidated ? cudaStreamCaptureStatusInvalidated
                                              : cudaStreamCaptureStatusActive)
                            : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    *e = new cuemu_event{flags, std::make_shared<event_state>()};
    keep(*e);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    forget(e);
    delete e; /* work that records it keeps its state */
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    device_guard g(device_mutex());
    if (cudaError_t err = sticky_error())
        return err;
    if (!e)
        return api_fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: no event");
    auto st = e->s;
    st->recorded = true;
    st->done = false;
    cudaError_t err = enqueue(s, "cudaEventRecord", [st]() {
        st->t = now();
        st->done = true;
    });
    st->seq = err || (s && s->capturing) ? 0 : last_queued();
    return err;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    device_guard g(device_mutex());
    if (!e)
        return api_fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: no event");
    return wait_seq(e->s->seq, "cudaEventSynchronize");
}

cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    device_guard g(device_mutex());
    if (cudaError_t e = sticky_error())
        return e;
    if (!a || !b || !a->s->recorded || !b->s->recorded ||
        (a->flags | b->flags) & cudaEventDisableTiming)
        return api_fail(cudaErrorInvalidResourceHandle,
                        "cudaEventElapsedTime: an event not recorded, or without timing");
    if (!a->s->done || !b->s->done)
        return api_fail(cudaErrorNotReady,
                        "cudaEventElapsedTime: an event has not completed (nothing waited for it)");
    *ms = (float)((b->s->t - a->s->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n)
{
    if (!g || !n)
        return api_fail(cudaErrorInvalidValue, "cudaGraphGetNodes");
    if (nodes)
        for (size_t i = 0; i < *n && i < g->nodes.size(); i++)
            nodes[i] = (cudaGraphNode_t)g->nodes[i].get();
    *n = g->nodes.size();
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags)
{
    (void)flags;
    device_guard gu(device_mutex());
    if (cudaError_t e = sticky_error())
        return e;
    if (!g)
        return api_fail(cudaErrorInvalidValue, "cudaGraphInstantiate: no graph");
    *exec = new cuemu_graph_exec{std::make_shared<std::vector<std::shared_ptr<work>>>(g->nodes)};
    keep(*exec);
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    device_guard g(device_mutex());
    if (cudaError_t e = sticky_error())
        return e;
    if (!exec)
        return api_fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: no graph");
    auto nodes = exec->nodes;
    return enqueue(s, "cudaGraphLaunch", [nodes]() {
        for (auto &n : *nodes)
            if (sticky_error() == cudaSuccess)
                n->fn();
    });
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    forget(g);
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    forget(exec);
    delete exec;
    return cudaSuccess;
}
