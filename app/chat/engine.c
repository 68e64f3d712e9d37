#include "engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/clamp.h"
#include "../../kernels/err.h"
#include "../session/records.h"
#include "conv.h"
#include "fidelity.h"

struct engine {
    loaded_model *lm;
    model_opts mo;
    engine_opts o;
    evict_rule rule; /* rule.window: the tokens a conversation's cache holds at most */
    conv **convs;
    int n_convs, next_id;
    size_t cap_convs;
    float *logits;
    int next; /* the token the last forward pass chose */
    fidelity fid;
    engine_text_fn on_text;
    void *text_ctx;
    atomic_int cancel, done;
    pthread_t worker;
    int running, job_conv, job_rc;
    const int *forced; /* engine_force_reply: the next reply's tokens */
    int n_forced;
    engine_logits_fn on_logits;
    void *logits_ctx;
    int have_pending;   /* a /set during a reply: applied when the reply ends */
    model_opts pending; /* mo as it will be then */
    char *job_text, *job_reply;
    char *system; /* the system preamble of conversations still to start, or NULL */
    char job_err[1024];
    pthread_t prep_thread; /* a prepared eviction being made between turns */
    int preparing;
    atomic_int prep_stop;
    conv *prep_conv;
};

static int forward(engine *e, conv *c, const int *ids, int n, int pick);

static conv *find(const engine *e, int id)
{
    for (int i = 0; i < e->n_convs; i++)
        if (e->convs[i]->id == id)
            return e->convs[i];
    err_set("no conversation %d", id);
    return NULL;
}

static int push_ids(conv *c, const int *ids, int n)
{
    if (err_grow(&c->ids, &c->cap_ids, (size_t)(c->n_ids + n), sizeof *c->ids,
                 "a conversation's tokens"))
        return -1;
    if (n > 0) /* a conversation whose first turn failed has no tokens, and no array */
        memcpy(c->ids + c->n_ids, ids, sizeof *ids * (size_t)n);
    c->n_ids += n;
    return 0;
}

static int push_turn(conv *c, int role, int start)
{
    if (err_grow(&c->turns, &c->cap_turns, (size_t)c->n_turns + 1, sizeof *c->turns,
                 "a conversation's turns"))
        return -1;
    c->turns[c->n_turns++] = (win_turn){.start = start, .role = role};
    return 0;
}

static void free_conv(conv *c)
{
    evict_discard(c);
    kv_seq_free(c->seq);
    free(c->ids);
    free(c->turns);
    free(c);
}

/* The one rule where threads meet: while a reply is being generated, its worker owns the
 * conversations, so every call that would change one is refused (sampling settings are the
 * exception: engine_set_sampling queues them for the reply's end). -1 with the error, or 0. */
static int refuse_while_running(const engine *e)
{
    return e->running
               ? err_set("a reply is being generated: wait for it to finish (Ctrl-C stops it)")
               : 0;
}

/* Between turns an eviction may be being prepared in the background (evict_prepare): it uses the
 * model, the pool and its conversation's cache, so every call that uses them first makes it give
 * way (within one layer's work) and waits for it. */
void engine_settle(engine *e)
{
    if (e->preparing) {
        pthread_join(e->prep_thread, NULL);
        e->preparing = 0;
    }
}

static void prep_halt(engine *e)
{
    if (e->preparing)
        atomic_store(&e->prep_stop, 1);
    engine_settle(e);
}

static void *prep_main(void *arg)
{
    engine *e = arg;
    evict_prepare(e->prep_conv, e->lm, &e->rule, e->mo.n_predict, &e->prep_stop);
    return NULL;
}

/* after a turn of c: its next eviction prepared in the background, when the next turn may need one
 */
static void prep_begin(engine *e, conv *c)
{
    if (!e->o.prepare || e->preparing || !c)
        return;
    atomic_store(&e->prep_stop, 0);
    e->prep_conv = c;
    e->preparing = pthread_create(&e->prep_thread, NULL, prep_main, e) == 0;
}

/* conversation `id`, for a call that changes it: NULL with the error while a reply runs, or when
 * there is no such conversation */
static conv *find_idle(engine *e, int id)
{
    prep_halt(e);
    return refuse_while_running(e) ? NULL : find(e, id);
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
                           .mode = eo->evict};
    e->logits = err_malloc(sizeof(float) * V, "logits");
    if (!e->logits || fid_init(&e->fid, V)) {
        engine_free(e);
        return NULL;
    }
    return e;
}

void engine_free(engine *e)
{
    if (!e)
        return;
    if (e->running)
        engine_turn_wait(e, NULL);
    prep_halt(e);
    for (int i = 0; i < e->n_convs; i++)
        free_conv(e->convs[i]);
    free(e->convs);
    fid_free(&e->fid);
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

static conv *add_conv(engine *e, kv_seq *seq)
{
    conv *c = err_calloc(1, sizeof *c, "a conversation");
    if (!c)
        return NULL;
    c->id = e->next_id;
    c->seq = seq ? seq : kv_seq_new(e->lm->pool, c->id);
    sampler_init(&c->smp, &e->mo.sp);
    if (!c->seq || err_grow(&e->convs, &e->cap_convs, (size_t)e->n_convs + 1, sizeof *e->convs,
                            "the conversations")) {
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
    prep_halt(e);
    if (refuse_while_running(e) || room_for_one(e))
        return -1;
    conv *c = add_conv(e, NULL);
    if (c)
        ev_emit(e->lm->bus, c->id, EV_NEW, NULL);
    return c ? c->id : -1;
}

int engine_fork(engine *e, int id)
{
    conv *p = find_idle(e, id);
    if (!p || room_for_one(e))
        return -1;
    evict_discard(p); /* the two now share the cache; the next turn of either prepares afresh */
    kv_seq *seq = kv_fork(p->seq, e->next_id);
    if (!seq)
        return -1;
    conv *c = add_conv(e, seq);
    if (!c) {
        kv_seq_free(seq);
        return -1;
    }
    if (push_ids(c, p->ids, p->n_ids))
        return -1;
    for (int i = 0; i < p->n_turns; i++) {
        if (push_turn(c, p->turns[i].role, p->turns[i].start))
            return -1;
        c->turns[i] = p->turns[i];
    }
    c->keep = p->keep;
    c->approximate = p->approximate;
    c->settled = p->settled;
    return c->id;
}

int engine_restore(engine *e, int id, const int *ids, int n, const win_turn *turns, int n_turns,
                   int keep, const sampler_params *sp, uint64_t rng, int approximate,
                   int turns_done)
{
    prep_halt(e);
    if (refuse_while_running(e))
        return -1;
    if (id < 1 || find(e, id))
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
    conv *c = add_conv(e, NULL);
    e->next_id = next > id + 1 ? next : id + 1;
    if (!c || push_ids(c, ids, n))
        return -1;
    for (int t = 0; t < n_turns; t++) {
        if (turns[t].start < 0 || turns[t].len < 0 || turns[t].start + turns[t].len > n ||
            push_turn(c, turns[t].role, 0))
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
    conv *c = find_idle(e, id);
    if (!c)
        return -1;
    enum { CHUNK = 128 };
    for (int done = kv_len(c->seq); done < c->n_ids;) {
        int k = c->n_ids - done < CHUNK ? c->n_ids - done : CHUNK;
        if (forward(e, c, c->ids + done, k, 0))
            return -1;
        done += k;
        if (progress)
            progress(ctx, done, c->n_ids);
    }
    return 0;
}

kv_seq *engine_conv_cache(engine *e, int id)
{
    prep_halt(e);
    conv *c = find(e, id);
    return c ? c->seq : NULL;
}

int engine_window_len(const engine *e, int id)
{
    conv *c = find(e, id);
    return c ? c->n_ids : -1;
}

int engine_turns_done(const engine *e, int id)
{
    conv *c = find(e, id);
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
    conv *c = find(e, id);
    *n = c ? c->n_ids : 0;
    return c ? c->ids : NULL;
}

const win_turn *engine_turns(const engine *e, int id, int *n)
{
    *n = -1;
    if (refuse_while_running(e))
        return NULL;
    conv *c = find(e, id);
    *n = c ? c->n_turns : 0;
    return c ? c->turns : NULL;
}

/* the stats event of c, from the thread its turn runs on */
static void stats(engine *e, const conv *c)
{
    kv_seq_stats s;
    kv_pool_stats p;
    kv_seq_get_stats(c->seq, &s);
    kv_pool_get_stats(e->lm->pool, &p);
    const kv_opts *ko = kv_pool_opts(e->lm->pool);
    json_t *f = json_pack(
        "{s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, "
        "s:s, s:s, s:I}",
        "tokens", s.len, "capacity", s.capacity, "window", e->rule.window, "bytes_used",
        (json_int_t)s.used_bytes, "bytes_reserved", (json_int_t)s.reserved_bytes, "pool_bytes",
        (json_int_t)p.pool_bytes, "pool_used", (json_int_t)p.used_bytes, "fragmentation",
        (json_int_t)(s.reserved_bytes > s.used_bytes ? s.reserved_bytes - s.used_bytes : 0),
        "hit_rate", c->needed ? (double)c->served / (double)c->needed : 0.0, "grows", s.grows,
        "evictions", c->evictions, "blocks_used", p.blocks_used, "blocks_total", p.blocks_total,
        "shared_blocks", s.shared_blocks, "offloaded_convs", p.offloaded, "keep", c->keep,
        "evict_min", e->rule.target, "cache_dtype", dt_name(ko->type), "layout",
        ko->layout == KV_PAGED ? "paged" : "contiguous", "host_bytes", (json_int_t)s.host_bytes);
    if (f && c->approximate)
        json_object_set_new(f, "approximate", json_true());
    size_t mem_free = 0, mem_total = 0;
    if (f && !e->lm->backend->mem_info(e->lm->backend, &mem_free, &mem_total)) {
        json_object_set_new(f, "memory_free", json_integer((json_int_t)mem_free));
        json_object_set_new(f, "memory_total", json_integer((json_int_t)mem_total));
    }
    ev_emit(e->lm->bus, c->id, EV_STATS, f);
}

void engine_stats(engine *e, int id)
{
    prep_halt(e);
    conv *c = find(e, id);
    if (c)
        stats(e, c);
}

/* ---- turns ---- */

/* the conversation (and its cache) back to its first `to` tokens: a retry, an edit, a reply that
 * ran into the stop text */
static int rollback(engine *e, conv *c, int to)
{
    int from = c->n_ids;
    if (kv_truncate(c->seq, to))
        return -1;
    c->n_ids = to;
    c->settled = c->settled < to ? c->settled : to;
    evict_discard(c); /* made for the window as it was */
    while (c->n_turns && c->turns[c->n_turns - 1].start >= to && c->n_turns > 1)
        c->n_turns--;
    if (c->n_turns) {
        win_turn *t = &c->turns[c->n_turns - 1];
        t->len = to - t->start < 0 ? 0 : to - t->start;
    }
    if (to != from)
        ev_emit(e->lm->bus, c->id, EV_TRUNCATE,
                json_pack("{s:i, s:i, s:I}", "from", from, "to", to, "bytes",
                          (json_int_t)((size_t)(from - to) * kv_bytes_per_token(e->lm->pool))));
    return 0;
}

static int last_turn(const conv *c, int role)
{
    for (int t = c->n_turns - 1; t >= 0; t--)
        if (c->turns[t].role == role)
            return t;
    return -1;
}

/* runs new tokens through the model; pick: also chooses the token that follows them (into e->next)
 */
static int forward(engine *e, conv *c, const int *ids, int n, int pick)
{
    kb_sample s = pick ? sampler_draw(&c->smp, c->ids, c->n_ids) : (kb_sample){0};
    return gpt2_step(&e->lm->model, e->lm->backend, c->seq, ids, n, pick ? &s : NULL, &e->next,
                     NULL);
}

static void offload_idle(engine *e, const conv *active)
{
    if (e->o.idle_offload <= 0)
        return;
    double now = ev_clock();
    for (int i = 0; i < e->n_convs; i++) {
        conv *c = e->convs[i];
        if (c != active && !kv_is_offloaded(c->seq) && kv_len(c->seq) &&
            now - c->last_used > e->o.idle_offload)
            kv_offload(c->seq);
    }
}

/* Before a turn of c: the memory prepared evictions hold goes back to the pool when the turn may
 * need it. Another conversation's plan always (a switch), and c's own when the pool could not hold
 * c's cache growing to the window beside it, which is all the turn can add before the eviction that
 * swaps the plan in: a plan only ever uses memory the pool can spare, then as now. */
static void turn_room(engine *e, conv *c)
{
    for (int i = 0; i < e->n_convs; i++)
        if (e->convs[i] != c)
            evict_discard(e->convs[i]);
    if (!c->plan)
        return;
    const kv_opts *o = kv_pool_opts(e->lm->pool);
    kv_pool_stats ps;
    kv_pool_get_stats(e->lm->pool, &ps);
    size_t per = kv_bytes_per_token(e->lm->pool), left = ps.pool_bytes - ps.used_bytes;
    size_t need =
        o->layout == KV_PAGED ? (size_t)(e->rule.window - c->n_ids + o->block_tokens) * per
        : o->prealloc         ? 0
                      : (size_t)e->rule.window * per; /* a growth copies into a new buffer */
    if (left < need)
        evict_discard(c);
}

/* appends a user message (after the preamble, for a new conversation) and prefills it */
static int user_turn(engine *e, conv *c, const char *text)
{
    const tokenizer *tok = e->lm->tok;
    int *pre = NULL, np = 0, cap_p = 0, *msg = NULL, nm = 0, cap_m = 0, rc = -1;
    int first_user = last_turn(c, ROLE_USER) < 0;
    if (c->n_turns == 0) {
        if (tpl_preamble(e->o.tpl, tok, e->system, &pre, &np, &cap_p))
            goto out;
        int keep = e->o.keep >= 0 ? e->o.keep : np;
        c->keep = keep > e->rule.window / 2 ? e->rule.window / 2 : keep;
    }
    if (tpl_user(e->o.tpl, tok, text, strlen(text), first_user, &msg, &nm, &cap_m))
        goto out;
    /* a message may take what the kept prefix leaves, less room for the reply (n), but never less
     * than a quarter of it: a message cut to the whole window would be evicted by its first reply
     * token */
    int free_ = e->rule.window - (c->keep > np ? c->keep : np), room = free_ - e->mo.n_predict,
        *m = msg;
    if (room < free_ / 4)
        room = free_ / 4;
    if (room > free_ - 1)
        room = free_ - 1;
    if (room < 1) {
        err_set("a window of %d tokens cannot hold the %s template's preamble (%d tokens) and a "
                "message; raise --ctx",
                e->rule.window, tpl_name(e->o.tpl), np);
        goto out;
    }
    if (nm > room) { /* longer than the window: keep its end, and say so */
        ev_emit(e->lm->bus, c->id, EV_NOTICE,
                json_pack("{s:s, s:i, s:i}", "text",
                          "message longer than the window: its beginning was cut", "tokens", nm,
                          "kept", room));
        m += nm - room;
        nm = room;
    }
    if (evict_make_room(c, e->lm, &e->rule, np + nm, 0))
        goto out;
    double t0 = ev_clock(); /* after the room is made: an eviction's time is in its own event */
    int cached = kv_len(c->seq), turns_before = c->n_turns, ids_before = c->n_ids;
    int ok = 1;
    if (np && (ok = !push_turn(c, ROLE_PREAMBLE, c->n_ids) && !push_ids(c, pre, np)))
        c->turns[c->n_turns - 1].len = np;
    if (ok && (ok = !push_turn(c, ROLE_USER, c->n_ids) && !push_ids(c, m, nm)))
        c->turns[c->n_turns - 1].len = nm;
    if (!ok || forward(e, c, c->ids + cached, c->n_ids - cached, 1)) {
        /* the message leaves no trace: the cache kept its length, the conversation drops it again
         */
        c->n_turns = turns_before;
        c->n_ids = ids_before;
        goto out;
    }
    c->needed += c->n_ids;
    c->served += cached;
    json_t *arr = json_array();
    for (int i = cached; i < c->n_ids; i++)
        json_array_append_new(arr, json_integer(c->ids[i]));
    ev_emit(e->lm->bus, c->id, EV_PREFILL,
            json_pack("{s:o, s:i, s:i, s:f}", "ids", arr, "cached", cached, "preamble", np, "ms",
                      (ev_clock() - t0) * 1e3));
    rc = 0;
out:
    free(pre);
    free(msg);
    return rc;
}

typedef struct {
    char *buf;
    size_t len, cap;
    int *tok_end; /* reply text length after each token */
    int n_tok;
} reply_text;

static int reply_add(reply_text *r, const char *s, size_t n)
{
    return err_append(&r->buf, &r->len, &r->cap, s, n, "a reply");
}

/* generates the reply to what the window ends with; *n_tok gets the tokens it kept, which no
 * window position can tell once an eviction inside the reply has moved them */
static int reply(engine *e, conv *c, char **out, int *n_tok)
{
    loaded_model *lm = e->lm;
    /* fixed for the whole reply: a /set meanwhile waits for its end (engine_set_sampling) */
    int eos = tok_eos(lm->tok), rc = 0, made = 0, n_predict = e->mo.n_predict;
    size_t emitted = 0;
    int stopped = 0;
    const char *stop = tpl_stop(e->o.tpl);
    reply_text r = {0};
    tok_stream ts;
    tok_stream_init(&ts, lm->tok);
    if (push_turn(c, ROLE_ASSISTANT, c->n_ids) ||
        !(r.tok_end = err_malloc(sizeof(int) * (size_t)(n_predict + 1), "a reply's token ends")))
        return -1;
    int turn = c->n_turns - 1;
    kv_set_busy(c->seq, 1);
    while (made < n_predict && !atomic_load(&e->cancel)) {
        double t0 = ev_clock();
        if (e->o.fidelity > 0 && made > 0 && made % e->o.fidelity == 0)
            fid_check(&e->fid, e->lm, c, e->rule.window);
        if (e->on_logits) {
            if ((rc = gpt2_last_logits(&lm->model, e->logits)))
                break;
            e->on_logits(e->logits_ctx, e->logits, lm->model.cfg.vocab_size);
        }
        int id = made < e->n_forced ? e->forced[made] : e->next;
        int end = id == eos;
        if (end && !tpl_keeps_eos(e->o.tpl))
            break;
        if ((rc = evict_make_room(c, e->lm, &e->rule, 1, 1)))
            break;
        turn = c->n_turns - 1; /* an eviction may have renumbered the turns */
        if ((rc = push_ids(c, &id, 1)))
            break;
        c->turns[turn].len++;
        made++;
        if ((rc = forward(e, c, &id, 1, !end && made < n_predict)))
            break;
        size_t len = 0;
        const char *piece = end ? "" : tok_stream_push(&ts, id, &len);
        ev_emit(lm->bus, c->id, EV_TOKEN,
                json_pack("{s:i, s:f, s:s%}", "id", id, "ms", (ev_clock() - t0) * 1e3, "text",
                          piece, len));
        if (end)
            break;
        if ((rc = reply_add(&r, piece, len)))
            break;
        r.tok_end[r.n_tok++] = (int)r.len;
        if (stop && strstr(r.buf, stop)) { /* roll back to before the stop text */
            int at = (int)(strstr(r.buf, stop) - r.buf), k = 0;
            while (k < r.n_tok && r.tok_end[k] <= at)
                k++;
            rc = rollback(e, c, c->n_ids - (r.n_tok - k));
            made -= r.n_tok - k;
            r.len = (size_t)(k ? r.tok_end[k - 1] : 0);
            r.buf[r.len] = 0;
            stopped = 1;
            break;
        }
        /* hold back what may be the start of the stop text */
        size_t safe = r.len;
        for (size_t k = stop ? strlen(stop) - 1 : 0; k > 0; k--)
            if (r.len >= k && !memcmp(r.buf + r.len - k, stop, k)) {
                safe = r.len - k;
                break;
            }
        if (e->on_text && safe > emitted)
            e->on_text(e->text_ctx, c->id, r.buf + emitted, safe - emitted);
        emitted = safe > emitted ? safe : emitted;
    }
    kv_set_busy(c->seq, 0);
    e->forced = NULL; /* one reply's worth */
    e->n_forced = 0;
    e->on_logits = NULL;
    if (!rc && !stopped) {
        size_t len;
        const char *rest = tok_stream_flush(&ts, &len);
        rc = reply_add(&r, rest, len);
    }
    if (!rc && e->on_text && r.len > emitted && r.buf)
        e->on_text(e->text_ctx, c->id, r.buf + emitted, r.len - emitted);
    tok_stream_free(&ts);
    free(r.tok_end);
    *n_tok = made;
    c->last_used = ev_clock();
    if (!r.buf)
        rc = rc ? rc : reply_add(&r, "", 0);
    if (out && !rc)
        *out = r.buf;
    else
        free(r.buf);
    return rc;
}

/* Closes a turn whose reply kept n_tok tokens: the stats, then the closing record (everything
 * needed to resume the conversation exactly); the reply goes to *out when it succeeded and the
 * caller wants it. Returns rc. */
static int turn_end(engine *e, conv *c, char *text, int n_tok, int rc, char **out)
{
    stats(e, c);
    rec_turn_end t = {.reply = text,
                      .tokens = n_tok,
                      .cancelled = atomic_load(&e->cancel) != 0,
                      .failed = rc != 0,
                      .ids = c->ids,
                      .n_ids = c->n_ids,
                      .turns = c->turns,
                      .n_turns = c->n_turns,
                      .keep = c->keep,
                      .rng = c->smp.rng,
                      .sp = c->smp.p,
                      .n_predict = e->mo.n_predict,
                      .approximate = c->approximate};
    ev_emit(e->lm->bus, c->id, EV_TURN_END, rec_turn_end_fields(&t));
    c->turns_done++;
    c->settled = c->n_ids;
    if (out && !rc)
        *out = text;
    else
        free(text);
    return rc;
}

/* a turn, on the caller's thread or the worker's */
static int run_turn(engine *e, int id, const char *text, char **out)
{
    conv *c = find(e, id);
    if (!c)
        return -1;
    if (out)
        *out = NULL;
    if (strlen(text) > ENGINE_MAX_MESSAGE)
        return err_set("a message of %zu bytes is longer than a message can be (%d KiB)",
                       strlen(text), ENGINE_MAX_MESSAGE / 1024);
    ev_emit(e->lm->bus, c->id, EV_USER, json_pack("{s:s}", "text", text));
    turn_room(e, c);
    offload_idle(e, c);
    c->last_used = ev_clock();
    kv_set_busy(c->seq, 1);
    int rc = user_turn(e, c, text);
    kv_set_busy(c->seq, 0);
    char *r = NULL;
    int n_tok = 0;
    if (!rc) {
        stats(e, c);
        rc = reply(e, c, &r, &n_tok);
    }
    return turn_end(e, c, r, n_tok, rc, out);
}

static int run_retry(engine *e, int id, char **out);

static void *worker(void *arg)
{
    engine *e = arg;
    e->job_rc = e->job_text ? run_turn(e, e->job_conv, e->job_text, &e->job_reply)
                            : run_retry(e, e->job_conv, &e->job_reply);
    if (e->job_rc)
        snprintf(e->job_err, sizeof e->job_err, "%s", err_msg());
    atomic_store(&e->done, 1);
    return NULL;
}

int engine_turn(engine *e, int id, const char *text, char **out)
{
    conv *c = find_idle(e, id);
    if (!c || run_turn(e, id, text, out))
        return -1;
    prep_begin(e, c);
    return 0;
}

int engine_retry(engine *e, int id, char **out)
{
    conv *c = find_idle(e, id);
    if (!c || run_retry(e, id, out))
        return -1;
    prep_begin(e, c);
    return 0;
}

int engine_turn_start(engine *e, int id, const char *text)
{
    if (!find_idle(e, id))
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
    if (pthread_create(&e->worker, NULL, worker, e))
        return err_set("cannot start the generation thread");
    e->running = 1;
    return 0;
}

static void apply_sampling(engine *e, const sampler_params *sp, int n_predict)
{
    prep_halt(e);
    for (int i = 0; i < e->n_convs; i++) /* made for the old n_predict */
        evict_discard(e->convs[i]);
    ev_emit(e->lm->bus, 0, EV_SET, rec_sampling(sp, n_predict));
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
    prep_begin(e, find(e, e->job_conv));
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

/* the reply a retry replaces (its turn index), or -1 with the reason there is none */
static int retry_turn(const conv *c)
{
    int t = last_turn(c, ROLE_ASSISTANT);
    if (t < 0 || t != c->n_turns - 1)
        return err_set("nothing to retry: the conversation does not end with a reply");
    /* a reply is drawn from the logits of the position before it: with nothing before it (evicted
     * by the reply itself), there is nothing to draw it from again */
    if (c->turns[t].start < 1)
        return err_set("cannot retry: the reply fills the window and what it answered was evicted "
                       "(raise --ctx)");
    return t;
}

int engine_can_retry(const engine *e, int id)
{
    conv *c = refuse_while_running(e) ? NULL : find(e, id);
    return c && retry_turn(c) >= 0 ? 0 : -1;
}

static int run_retry(engine *e, int id, char **out)
{
    conv *c = find(e, id);
    if (!c)
        return -1;
    int t = retry_turn(c);
    if (t < 0)
        return -1;
    int to = c->turns[t].start;
    ev_emit(e->lm->bus, c->id, EV_RETRY, NULL);
    double t0 = ev_clock();
    int rc = rollback(e, c, to);
    if (!rc) {
        c->n_turns = t;
        rc = kv_truncate(c->seq, to - 1) || forward(e, c, c->ids + to - 1, 1, 1) ? -1 : 0;
    }
    char *r = NULL;
    int n_tok = 0;
    if (!rc) {
        ev_emit(e->lm->bus, c->id, EV_PREFILL,
                json_pack("{s:[i], s:i, s:i, s:f}", "ids", c->ids[to - 1], "cached", to - 1,
                          "preamble", 0, "ms", (ev_clock() - t0) * 1e3));
        rc = reply(e, c, &r, &n_tok);
    }
    return turn_end(e, c, r, n_tok, rc, out);
}

/* the first half of an edit: the last message and its reply rolled back */
static conv *edit_rollback(engine *e, int id)
{
    conv *c = find_idle(e, id);
    if (!c)
        return NULL;
    int t = last_turn(c, ROLE_USER);
    if (t < 0) {
        err_set("nothing to edit: the conversation has no message yet");
        return NULL;
    }
    ev_emit(e->lm->bus, c->id, EV_EDIT, NULL);
    if (rollback(e, c, c->turns[t].start))
        return NULL;
    c->n_turns = t;
    return c;
}

int engine_edit(engine *e, int id, const char *text, char **out)
{
    conv *c = edit_rollback(e, id);
    if (!c || run_turn(e, id, text, out))
        return -1;
    prep_begin(e, c);
    return 0;
}

int engine_edit_start(engine *e, int id, const char *text)
{
    return edit_rollback(e, id) ? engine_turn_start(e, id, text) : -1;
}

int engine_clear(engine *e, int id)
{
    conv *c = find_idle(e, id);
    if (!c)
        return -1;
    ev_emit(e->lm->bus, c->id, EV_CLEAR, NULL);
    int keep_turns = c->n_turns && c->turns[0].role == ROLE_PREAMBLE ? 1 : 0;
    if (rollback(e, c, keep_turns ? c->turns[0].len : 0))
        return -1;
    c->n_turns = keep_turns;
    return 0;
}

int engine_set_system(engine *e, const char *text)
{
    if (refuse_while_running(e))
        return -1;
    char *copy = text && *text ? strdup(text) : NULL;
    if (text && *text && !copy)
        return err_set("out of memory");
    free(e->system);
    e->system = copy;
    ev_emit(e->lm->bus, 0, EV_SYSTEM, json_pack("{s:s}", "text", copy ? copy : ""));
    return 0;
}

const char *engine_system(const engine *e) { return e->system; }

int engine_set_rng(engine *e, int id, uint64_t rng)
{
    conv *c = find_idle(e, id);
    if (!c)
        return -1;
    c->smp.rng = rng;
    return 0;
}

int engine_pin(engine *e, int id, int turn, int pinned)
{
    conv *c = find_idle(e, id);
    if (!c)
        return -1;
    if (turn < 0 || turn >= c->n_turns)
        return err_set("no turn %d (the conversation has %d)", turn, c->n_turns);
    c->turns[turn].pinned = pinned;
    ev_emit(e->lm->bus, c->id, EV_PIN, json_pack("{s:i, s:b}", "turn", turn, "pinned", pinned));
    return 0;
}
