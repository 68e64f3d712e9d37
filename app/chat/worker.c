/* The reply's thread: the worker a started turn (or retry) runs on, and the calls that start, wait
 * for and cancel it (a /set waits here for the reply's end); a turn on the caller's thread too.
 * May call: turn.c, conv.c, records.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "records.h"
#include "engine_state.h"

static void *worker(void *arg)
{
    engine *e = arg;
    e->job_rc = e->job_text ? eng_run_turn(e, e->job_conv, e->job_text, &e->job_reply)
                            : eng_run_retry(e, e->job_conv, &e->job_reply);
    if (e->job_rc)
        snprintf(e->job_err, sizeof e->job_err, "%s", err_msg());
    atomic_store(&e->done, 1);
    return NULL;
}

int engine_turn(engine *e, int id, const char *text, char **out)
{
    conv *c = eng_find_idle(e, id);
    atomic_store(&e->cancel, 0); /* a turn starts uncancelled, as engine_turn_start's does */
    if (!c || eng_run_turn(e, id, text, out))
        return -1;
    eng_prep_begin(e, c);
    return 0;
}

int engine_retry(engine *e, int id, char **out)
{
    conv *c = eng_find_idle(e, id);
    atomic_store(&e->cancel, 0);
    if (!c || eng_run_retry(e, id, out))
        return -1;
    eng_prep_begin(e, c);
    return 0;
}

int engine_turn_start(engine *e, int id, const char *text)
{
    if (!eng_find_idle(e, id))
        return -1;
    free(e->job_text);
    e->job_text = NULL;
    size_t len = 0, cap = 0;
    if (text && err_append(&e->job_text, &len, &cap, text, strlen(text), "a message"))
        return -1;
    e->job_conv = id;
    e->job_reply = NULL;
    atomic_store(&e->cancel, 0);
    atomic_store(&e->done, 0);
    int rc = pthread_create(&e->worker, NULL, worker, e);
    if (rc) /* EAGAIN: no memory for its stack (a memory limit), or the threads limit */
        return err_set("cannot start the generation thread: %s",
                       rc == EAGAIN ? "out of memory or threads (ulimit -v, ulimit -u)"
                                    : strerror(rc));
    e->running = 1;
    return 0;
}

static void apply_sampling(engine *e, const sampler_params *sp, int n_predict)
{
    eng_prep_halt(e);
    for (int i = 0; i < e->n_convs; i++) /* made for the old n_predict */
        evict_discard(e->convs[i]);
    ev_sampling block = rec_sampling(sp, n_predict);
    ev_set set = ev_set_of(&block);
    ev_emit_set(e->lm->bus, 0, &set);
    uint64_t old_seed = e->mo.sp.seed;
    e->mo.sp = *sp;
    e->mo.n_predict = n_predict;
    for (int i = 0; i < e->n_convs; i++) {
        sampler *smp = &e->convs[i]->smp;
        smp->p = *sp;
        if (sp->seed != old_seed)
            sampler_init(smp, sp);
    }
}

int engine_turn_wait(engine *e, char **reply_out)
{
    if (!e->running)
        return err_set("no reply is being generated");
    pthread_join(e->worker, NULL);
    e->running = 0;
    if (e->have_pending) {
        e->have_pending = 0;
        apply_sampling(e, &e->pending.sp, e->pending.n_predict);
    }
    free(e->job_text);
    e->job_text = NULL;
    if (e->job_rc) {
        free(e->job_reply);
        return err_set("%s", e->job_err);
    }
    eng_prep_begin(e, eng_find(e, e->job_conv));
    if (reply_out)
        *reply_out = e->job_reply;
    else
        free(e->job_reply);
    return 0;
}

void engine_cancel(engine *e) { atomic_store(&e->cancel, 1); }

int engine_turn_done(const engine *e) { return !e->running || atomic_load(&e->done); }

int engine_set_sampling(engine *e, const sampler_params *sp, int n_predict)
{
    if (e->running) {
        if (!e->have_pending)
            e->pending = e->mo;
        e->pending.sp = *sp;
        e->pending.n_predict = n_predict;
        e->have_pending = 1;
        return 1;
    }
    apply_sampling(e, sp, n_predict);
    return 0;
}

const model_opts *engine_model_opts(const engine *e)
{
    return e->have_pending ? &e->pending : &e->mo;
}
