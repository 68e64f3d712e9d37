/* The decode step as one CUDA graph launch. Its scalars (token, position, sampling settings, the
 * draw) are read from device memory, so a recording serves every step while the buffers it names
 * stay put; the recording begins by copying them there from their pinned host twin (the scalars and
 * the new id, a few dozen bytes: the history's changed ids are sent before the launch), and ends by
 * copying the chosen id back into it. A step's key (the caller's buffers and cache view) and the
 * backend's buffer generation say which recording fits: the first time a key is seen the step runs
 * eagerly, so that every buffer grows to size first; the second time it is recorded and launched;
 * later it replays. A few recordings are kept (a reply's last step, which chooses nothing, and each
 * conversation have their own). */
#include <string.h>

#include "common.cuh"

static void forget(cu_graph *g)
{
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    memset(g, 0, sizeof *g);
}

void cuda_graphs_free(cuda_state *s)
{
    for (int i = 0; i < CUDA_GRAPHS; i++)
        forget(&s->graphs[i]);
}

/* the recording for this key, or a slot (free or least recently used) made ready for it */
static cu_graph *lookup(cuda_state *s, const kb_step *st, int *fresh)
{
    cu_graph *lru = &s->graphs[0];
    for (int i = 0; i < CUDA_GRAPHS; i++) {
        cu_graph *g = &s->graphs[i];
        if (g->key_bytes == st->key_bytes && g->generation == s->generation &&
            !memcmp(g->key, st->key, st->key_bytes)) {
            *fresh = 0;
            return g;
        }
        if (g->used < lru->used)
            lru = g;
    }
    forget(lru);
    memcpy(lru->key, st->key, st->key_bytes);
    lru->key_bytes = st->key_bytes;
    lru->generation = s->generation;
    *fresh = 1;
    return lru;
}

static int begin(cuda_state *s, const kb_step *st, int *replayed)
{
    int recordable = st->n == 1 && st->key_bytes && st->key_bytes <= sizeof s->graphs[0].key;
    if (cuda_stage(s, st->ids, st->n, st->past, st->pos0, st->pick))
        return -1;
    CK(cudaEventRecord(s->started, s->stream));
    if (cuda_upload(s, !recordable)) /* a recorded step copies its scalars itself */
        return -1;
    s->in_step = 1;
    s->out = st->pick ? st->next : NULL;
    if (!recordable)
        return 0; /* prefill: shapes change from call to call */
    int fresh;
    cu_graph *g = lookup(s, st, &fresh);
    g->used = ++s->tick;
    size_t bytes = cu_header_bytes(1);
    if (fresh || g->eager_only) {
        CK(cudaMemcpyAsync(s->dstep, s->hstep, bytes, cudaMemcpyHostToDevice, s->stream));
        return 0;
    }
    s->cur = g;
    if (g->exec) {
        CK(cudaGraphLaunch(g->exec, s->stream));
        s->mode = CU_REPLAY;
        s->replays++;
        *replayed = 1;
        return 0;
    }
    CK(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    s->mode = CU_CAPTURE;
    if (cudaMemcpyAsync(s->dstep, s->hstep, bytes, cudaMemcpyHostToDevice, s->stream) !=
        cudaSuccess)
        g->eager_only =
            1; /* a broken recording: end_capture ends it and the step is issued again */
    return 0;
}

/* A step that fails to begin leaves no step state behind (the caller does not end it): later calls
 * must not take its staged scalars or its output for theirs. */
int cuda_step_begin(kb_backend *b, const kb_step *st, int *replayed)
{
    cuda_state *s = cuda_of(b);
    *replayed = 0;
    s->mode = CU_EAGER;
    s->cur = NULL;
    if (!begin(s, st, replayed))
        return 0; /* a capture, once begun, cannot fail here: it is ended by cuda_step_end */
    s->in_step = 0;
    s->mode = CU_EAGER;
    s->cur = NULL;
    s->out = NULL;
    *replayed = 0;
    return -1;
}

/* ends a recording; 1: it failed (nothing ran), the step must be issued again and will run eagerly
 */
static int end_capture(cuda_state *s, int ok)
{
    cu_graph *g = s->cur;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &graph);
    size_t nodes = 0;
    if (e == cudaSuccess && ok && s->generation == g->generation &&
        (e = cudaGraphGetNodes(graph, NULL, &nodes)) == cudaSuccess)
        e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (e != cudaSuccess || !ok || !exec || g->eager_only) {
        if (exec)
            cudaGraphExecDestroy(exec);
        cudaGetLastError(); /* a failed capture leaves no sticky error; clear what it reported */
        g->eager_only = 1;
        return 1;
    }
    g->exec = exec;
    s->nodes = (int)nodes;
    CK(cudaGraphLaunch(exec, s->stream)); /* recording ran nothing: run it now */
    return 0;
}

int cuda_step_end(kb_backend *b, int ok)
{
    cuda_state *s = cuda_of(b);
    int rc = s->mode == CU_CAPTURE ? end_capture(s, ok) : 0;
    if (!rc) {
        float ms = 0;
        cudaError_t e = cudaEventRecord(s->ended, s->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s->stream);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&ms, s->started, s->ended);
        if (e != cudaSuccess)
            rc = err_set("running a step on the GPU: %s", cudaGetErrorString(e));
        else if (ok && s->out)
            *s->out = s->hstep->out;
        s->step_seconds = ms / 1e3;
    }
    s->in_step = 0;
    s->mode = CU_EAGER;
    s->out = NULL;
    s->cur = NULL;
    return rc;
}

double cuda_step_seconds(kb_backend *b) { return cuda_of(b)->step_seconds; }

extern "C" long cuda_graph_replays(kb_backend *b) { return cuda_of(b)->replays; }
