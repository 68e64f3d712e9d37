/* The engine's public verbs (engine.h): the conversations (new, fork, restore), what reads them,
 * changing their past (edit, clear, pin, rank), the system preamble, the stats event. May call
 * every file below it: worker.c, turn.c, conv.c (and what they call); none of them calls here. */
#include <stdlib.h>
#include <string.h>

#include "../../kernels/clamp.h"
#include "../../kernels/err.h"
#include "../safe_text.h"
#include "engine_state.h"

static void free_conv(conv *c)
{
    evict_discard(c);
    draft_free(c->draft);
    kv_seq_free(c->seq);
    free(c->ids);
    free(c->turns);
    free(c);
}

engine *engine_create(loaded_model *lm, const model_opts *mo, const engine_opts *eo)
{
    engine *e = err_calloc(1, sizeof *e, "the chat engine");
    if (!e)
        return NULL;
    e->lm = lm;
    e->mo = *mo;
    e->o = *eo;
    e->o.system = NULL; /* the engine keeps its own copy */
    if (eo->system && *eo->system && !(e->system = strdup(eo->system))) {
        free(e);
        err_set("out of memory");
        return NULL;
    }
    int window = kv_pool_opts(lm->pool)->window;
    e->next_id = 1;
    int V = lm->model.cfg.vocab_size;
    e->rule = (evict_rule){.window = window,
                           .target = eo->evict_min > 0 ? eo->evict_min : window / 4,
                           .mode = eo->evict,
                           .when = eo->evict_at,
                           .policy = eo->policy};
    if (win_reads(eo->policy) && e->o.attention <= 0) /* the rule goes by the reading */
        e->o.attention = ENGINE_ATTENTION_EVERY;
    rd_init(&e->reading, lm->model.cfg.n_layer, lm->model.cfg.n_head);
    e->logits = err_malloc(sizeof(float) * V, "logits");
    if (!e->logits || fid_init(&e->fid, V)) {
        engine_free(e);
        return NULL;
    }
    /* one drafter model for the chat; each conversation's drafter has its own cache */
    if (eo->draft.kind != DRAFT_NONE &&
        (!(e->draft_root = draft_new(&eo->draft, &lm->model, lm->dir, lm->backend, lm->pool, -1)) ||
         !(e->spec = spec_new(&lm->model, lm->backend, e->draft_root)))) {
        engine_free(e);
        return NULL;
    }
    if (e->draft_root)
        e->o.draft = *draft_get_opts(e->draft_root); /* its name lives with the drafter */
    return e;
}

void engine_free(engine *e)
{
    if (!e)
        return;
    if (e->running)
        engine_turn_wait(e, NULL);
    eng_prep_halt(e);
    for (int i = 0; i < e->n_convs; i++)
        free_conv(e->convs[i]);
    free(e->convs);
    spec_free(e->spec);
    draft_free(e->draft_root);
    fid_free(&e->fid);
    rd_free(&e->reading);
    free(e->logits);
    free(e->system);
    free(e);
}

void engine_on_text(engine *e, engine_text_fn fn, void *ctx)
{
    e->on_text = fn;
    e->text_ctx = ctx;
}

void engine_force_reply(engine *e, const int *ids, int n, engine_logits_fn fn, void *ctx)
{
    e->forced = ids;
    e->n_forced = n;
    e->on_logits = fn;
    e->logits_ctx = ctx;
}

/* a conversation with cache seq (NULL: a new one) and, with --draft, a drafter whose cache is a
 * fork of parent's (NULL: empty) */
static conv *add_conv(engine *e, kv_seq *seq, conv *parent)
{
    conv *c = err_calloc(1, sizeof *c, "a conversation");
    if (!c)
        return NULL;
    c->id = e->next_id;
    c->seq = seq ? seq : kv_seq_new(e->lm->pool, c->id);
    sampler_init(&c->smp, &e->mo.sp);
    int ok = c->seq &&
             (!e->draft_root || (c->draft = parent ? draft_clone(parent->draft, c->id, 1)
                                                   : draft_clone(e->draft_root, c->id, 0))) &&
             !err_grow(&e->convs, &e->cap_convs, (size_t)e->n_convs + 1, sizeof *e->convs,
                       "the conversations");
    if (!ok) {
        c->seq = seq ? NULL : c->seq; /* a fork's cache is the caller's to free */
        free_conv(c);
        return NULL;
    }
    e->convs[e->n_convs++] = c;
    e->next_id++;
    c->last_used = ev_clock();
    return c;
}

/* a refused new conversation changes nothing: the check comes before anything is made */
static int room_for_one(const engine *e)
{
    if (e->o.max_convs && e->next_id > e->o.max_convs)
        return err_set("no more conversations: this chat holds %d", e->o.max_convs);
    return 0;
}

int engine_new_conv(engine *e)
{
    eng_prep_halt(e);
    if (eng_refuse_while_running(e) || room_for_one(e))
        return -1;
    conv *c = add_conv(e, NULL, NULL);
    if (c)
        ev_emit_new(e->lm->bus, c->id, &(ev_new){EV_OPT(window, e->rule.window)});
    return c ? c->id : -1;
}

int engine_fork(engine *e, int id)
{
    conv *p = eng_find_idle(e, id);
    if (!p || room_for_one(e))
        return -1;
    evict_discard(p); /* the two now share the cache; the next turn of either prepares afresh */
    kv_seq *seq = kv_fork(p->seq, e->next_id);
    if (!seq)
        return -1;
    conv *c = add_conv(e, seq, p);
    if (!c) {
        kv_seq_free(seq);
        return -1;
    }
    if (eng_push_ids(c, p->ids, p->n_ids))
        return -1;
    for (int i = 0; i < p->n_turns; i++) {
        if (eng_push_turn(c, p->turns[i].role, p->turns[i].start))
            return -1;
        c->turns[i] = p->turns[i];
    }
    c->keep = p->keep;
    c->gone_no = p->gone_no;
    c->approximate = p->approximate;
    c->settled = p->settled;
    return c->id;
}

int engine_restore(engine *e, int id, const int *ids, int n, const win_turn *turns, int n_turns,
                   int keep, const sampler_params *sp, uint64_t rng, int approximate,
                   int turns_done)
{
    eng_prep_halt(e);
    if (eng_refuse_while_running(e))
        return -1;
    if (id < 1 || eng_find(e, id))
        return err_set("conversation %d cannot be restored twice", id);
    if (n > e->rule.window)
        return err_set("conversation %d holds %d tokens, more than the window of %d", id, n,
                       e->rule.window);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->lm->model.cfg.vocab_size)
            return err_set("conversation %d: token id %d is outside this model's vocabulary", id,
                           ids[i]);
    int next = e->next_id;
    e->next_id = id;
    conv *c = add_conv(e, NULL, NULL);
    e->next_id = next > id + 1 ? next : id + 1;
    if (!c || eng_push_ids(c, ids, n))
        return -1;
    for (int t = 0; t < n_turns; t++) {
        if (turns[t].start < 0 || turns[t].len < 0 || turns[t].start + turns[t].len > n ||
            eng_push_turn(c, turns[t].role, 0))
            return err_set("conversation %d: a recorded turn lies outside its window", id);
        c->turns[t] = turns[t];
    }
    c->keep = clamp_int(keep, 0, n);
    c->smp.p = *sp;
    c->smp.rng = rng;
    c->approximate = approximate;
    c->turns_done = turns_done;
    c->settled = n;
    return 0;
}

int engine_prefill_window(engine *e, int id, void (*progress)(void *ctx, int done, int total),
                          void *ctx)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    enum { CHUNK = 128 };
    for (int done = kv_len(c->seq); done < c->n_ids;) {
        int k = c->n_ids - done < CHUNK ? c->n_ids - done : CHUNK;
        if (eng_forward(e, c, c->ids + done, k, ENG_NOTHING))
            return -1;
        done += k;
        if (progress)
            progress(ctx, done, c->n_ids);
    }
    return 0;
}

kv_seq *engine_conv_cache(engine *e, int id)
{
    eng_prep_halt(e);
    conv *c = eng_find(e, id);
    return c ? c->seq : NULL;
}

int engine_window_len(const engine *e, int id)
{
    conv *c = eng_find(e, id);
    return c ? c->n_ids : -1;
}

int engine_turns_done(const engine *e, int id)
{
    conv *c = eng_find(e, id);
    return c ? c->turns_done : -1;
}

int engine_conv_count(const engine *e) { return e->n_convs; }
int engine_conv_id(const engine *e, int index) { return e->convs[index]->id; }
const float *engine_logits(engine *e)
{
    return gpt2_last_logits(&e->lm->model, e->logits) ? NULL : e->logits;
}

const int *engine_window(const engine *e, int id, int *n)
{
    conv *c = eng_find(e, id);
    *n = c ? c->n_ids : 0;
    return c ? c->ids : NULL;
}

const win_turn *engine_turns(const engine *e, int id, int *n)
{
    *n = -1;
    if (eng_refuse_while_running(e))
        return NULL;
    conv *c = eng_find(e, id);
    *n = c ? c->n_turns : 0;
    return c ? c->turns : NULL;
}

drafter *engine_drafter(engine *e, int id)
{
    conv *c = eng_find(e, id);
    return c ? c->draft : NULL;
}

const spec_stats *engine_spec_stats(const engine *e)
{
    return e->spec && !e->running ? spec_get_stats(e->spec) : NULL; /* the worker writes them */
}

void engine_stats(engine *e, int id)
{
    eng_prep_halt(e);
    conv *c = eng_find(e, id);
    if (c)
        eng_stats(e, c);
}

int engine_set_system(engine *e, const char *text)
{
    if (eng_refuse_while_running(e))
        return -1;
    int latin1 = 0;
    char *copy = text && *text ? utf8_from_latin1(text, &latin1) : NULL;
    if (text && *text && !copy)
        return -1;
    free(e->system);
    e->system = copy;
    ev_emit_system(e->lm->bus, 0, &(ev_system){.text = copy});
    if (latin1)
        eng_latin1_notice(e, 0, "the system preamble", latin1);
    return 0;
}

const char *engine_system(const engine *e) { return e->system; }

int engine_set_rng(engine *e, int id, uint64_t rng)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    c->smp.rng = rng;
    return 0;
}

int engine_can_retry(const engine *e, int id)
{
    conv *c = eng_refuse_while_running(e) ? NULL : eng_find(e, id);
    return c && eng_retry_turn(c) >= 0 ? 0 : -1;
}

int engine_edit(engine *e, int id, const char *text, char **out)
{
    atomic_store(&e->cancel, 0);
    conv *c = eng_edit_rollback(e, id);
    if (!c || eng_run_turn(e, id, text, out))
        return -1;
    eng_prep_begin(e, c);
    return 0;
}

int engine_edit_start(engine *e, int id, const char *text)
{
    return eng_edit_rollback(e, id) ? engine_turn_start(e, id, text) : -1;
}

int engine_clear(engine *e, int id)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    ev_emit_clear(e->lm->bus, c->id, &(ev_clear){0});
    int keep_turns = c->n_turns && c->turns[0].role == ROLE_PREAMBLE ? 1 : 0;
    if (eng_rollback(c, keep_turns ? c->turns[0].len : 0))
        return -1;
    c->n_turns = keep_turns;
    return 0;
}

int engine_rank(engine *e, int id, const float *rank, int n)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    if (e->rule.policy != WIN_RANKED || n != c->n_turns)
        return err_set("ranks for %d turns of a conversation of %d%s", n, c->n_turns,
                       e->rule.policy != WIN_RANKED ? " under another eviction rule" : "");
    for (int t = 0; t < n; t++)
        c->turns[t].read = rank[t];
    return 0;
}

int engine_pin(engine *e, int id, int turn, int pinned)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return -1;
    if (turn < 0 || turn >= c->n_turns)
        return err_set("no turn %d (the conversation has %d)", turn, c->n_turns);
    c->turns[turn].pinned = pinned;
    ev_emit_pin(e->lm->bus, c->id, &(ev_pin){.turn = turn, EV_OPT(pinned, pinned)});
    return 0;
}

/* Between turns an eviction may be being prepared in the background (evict_prepare): it uses the
 * model, the pool and its conversation's cache, so every call that uses them first makes it give
 * way (within one layer's work) and waits for it. */
void engine_settle(engine *e) { eng_prep_wait(e); }
