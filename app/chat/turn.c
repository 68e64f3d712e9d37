/* The turn machinery: making a turn's room, the user's message through the model, the reply loop
 * (its stop text held back by stop_text.c) and the turn_end record that closes it; a retry and an
 * edit are turns too (the reply, or the message and its reply, rolled back first). May call:
 * conv.c, eviction.c, fidelity.c, records.c, stop_text.c, template.c and model/. */
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../safe_text.h"
#include "records.h"
#include "engine_state.h"
#include "stop_text.h"

/* runs new tokens through the model; pick: also chooses the token that follows them (into e->next)
 */
int eng_forward(engine *e, conv *c, const int *ids, int n, int next)
{
    kb_sample s = next == ENG_DRAW ? sampler_draw(&c->smp, c->ids, c->n_ids) : (kb_sample){0};
    return gpt2_step(&e->lm->model, e->lm->backend, c->seq, ids, n, next == ENG_DRAW ? &s : NULL,
                     &e->next, next == ENG_LOGITS ? e->logits : NULL);
}

int eng_next(const engine *e, int made)
{
    return made >= e->mo.n_predict ? ENG_NOTHING : made < e->n_forced ? ENG_LOGITS : ENG_DRAW;
}

/* A reply's decode step of id (pushed last), with its reading probed when attention events are
 * on: the probe is the model's for this step alone (an eviction's passes, a prefill and the
 * preparation between turns run without it) */
static int read_step(engine *e, conv *c, const int *id, int next)
{
    gpt2_model *m = &e->lm->model;
    if (e->o.attention <= 0)
        return eng_forward(e, c, id, 1, next);
    if (rd_spans(&e->reading, c->turns, c->n_turns, c->keep, c->n_ids, e->lm->bus, c->id))
        return -1;
    m->probe = &e->reading.probe;
    int rc = eng_forward(e, c, id, 1, next);
    m->probe = NULL;
    if (rc)
        return rc;
    rd_step(&e->reading);
    for (int t = 0; win_reads(e->rule.policy) && t < c->n_turns; t++) /* span t + 1 */
        c->turns[t].took += (float)e->reading.now[t + 1];
    return 0;
}

static void offload_idle(engine *e, const conv *active)
{
    if (e->o.idle_offload <= 0)
        return;
    double now = ev_clock();
    for (int i = 0; i < e->n_convs; i++) {
        conv *c = e->convs[i];
        if (c == active || now - c->last_used <= e->o.idle_offload)
            continue;
        kv_seq *d = c->draft ? draft_seq(c->draft) : NULL;
        if (!kv_is_offloaded(c->seq) && kv_len(c->seq))
            kv_offload(c->seq);
        if (d && !kv_is_offloaded(d) && kv_len(d))
            kv_offload(d);
    }
}

/* both caches of c (its own and its drafter's) kept in place while its turn runs */
static void set_busy(conv *c, int busy)
{
    kv_set_busy(c->seq, busy);
    if (c->draft && draft_seq(c->draft))
        kv_set_busy(draft_seq(c->draft), busy);
}

/* evict_make_room, and the drafter's cache cut back to what the window still begins with (it
 * re-prefills the rest at its next round, as the eviction did) */
static int make_room(engine *e, conv *c, int need, int reply, int open_last)
{
    int before = c->evictions;
    if (evict_make_room(c, e->lm, &e->rule, need, reply, open_last))
        return -1;
    return c->draft && c->evictions != before ? draft_settle(c->draft, c->ids, c->n_ids) : 0;
}

/* The tokens a speculative round may give after the reply's token `made` (pushed, not yet through
 * the model): 1 or less, a plain step, where each token needs its own pass (forced tokens, their
 * logits, attention's probe); else what the reply has left, what the window holds without an
 * eviction (the drafts go into the cache at once), and what a round can give before the step the
 * next fidelity check reads the logits of (a plain one: a verify pass's last row may be a rejected
 * draft's) */
static int round_room(const engine *e, const conv *c, int made, int n_predict)
{
    if (!e->spec || e->n_forced || e->on_logits || e->o.attention > 0)
        return 1;
    int room = n_predict - made, fit = e->rule.window - c->n_ids + 1;
    room = fit < room ? fit : room;
    if (e->o.fidelity > 0) {
        int to = (e->o.fidelity - made % e->o.fidelity) % e->o.fidelity;
        room = to < room ? to : room;
    }
    return room;
}

/* The reply's next token (into e->next) from a speculative round, or from the last round's queue
 * (its token already in the cache): the verify event, and the truncate event of what the model
 * rejected (the drafter reports its own) */
static int spec_step(engine *e, conv *c, int room)
{
    spec_stats was = *spec_get_stats(e->spec);
    int fresh = !spec_queued(e->spec), rejected;
    if (fresh)
        spec_use(e->spec, c->draft);
    if (spec_next(e->spec, c->seq, c->ids, c->n_ids, &c->smp, room, &e->next, &rejected))
        return -1;
    if (!fresh)
        return 0;
    const spec_stats *now = spec_get_stats(e->spec);
    kv_seq *d = draft_seq(c->draft);
    ev_emit_verify(e->lm->bus, c->id,
                   &(ev_verify){.drafted = (int)(now->drafted - was.drafted),
                                .accepted = (int)(now->accepted - was.accepted),
                                EV_OPT(draft_ms, (now->draft_s - was.draft_s) * 1e3),
                                EV_OPT(ms, (now->verify_s - was.verify_s) * 1e3),
                                .draft_tokens = d ? kv_len(d) : 0,
                                .has_draft_tokens = d != NULL});
    return kv_rewind(c->seq, kv_len(c->seq) - rejected, 1);
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
    kv_pool_stats ps;
    kv_pool_get_stats(e->lm->pool, &ps);
    size_t left = ps.pool_bytes - ps.used_bytes;
    size_t need = kv_growth_bytes(c->seq, e->rule.window);
    if (left < need)
        evict_discard(c);
}

/* appends a user message (after the preamble, for a new conversation) and prefills it */
static int user_turn(engine *e, conv *c, const char *text)
{
    const tokenizer *tok = e->lm->tok;
    int *pre = NULL, np = 0, cap_p = 0, *msg = NULL, nm = 0, cap_m = 0, rc = -1;
    int first_user = eng_last_turn(c, ROLE_USER) < 0;
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
    if (nm > room) { /* longer than the window: keep its end, and say how much went */
        char said[160];
        /* byte-level tokens: their pieces add up to the template's text */
        long long cut = -(long long)tpl_user_prefix(e->o.tpl, first_user);
        for (int i = 0; i < nm - room; i++) {
            size_t len = 0;
            tok_piece(tok, m[i], &len);
            cut += (long long)len;
        }
        cut = cut < 0 ? 0 : cut > (long long)strlen(text) ? (long long)strlen(text) : cut;
        snprintf(said, sizeof said,
                 "message longer than the window: its beginning was cut (%d of its %d tokens "
                 "dropped, the last %d kept)",
                 nm - room, nm, room);
        ev_emit_notice(e->lm->bus, c->id,
                       &(ev_notice){EV_OPT(text, said), EV_OPT(tokens, nm), EV_OPT(kept, room),
                                    EV_OPT(cut_bytes, (int)cut)});
        m += nm - room;
        nm = room;
    }
    if (make_room(e, c, np + nm, win_reply_room(e->rule.when, e->mo.n_predict), 0))
        goto out;
    double t0 = ev_clock(); /* after the room is made: an eviction's time is in its own event */
    int cached = kv_len(c->seq), turns_before = c->n_turns, ids_before = c->n_ids;
    int ok = 1;
    if (np && (ok = !eng_push_turn(c, ROLE_PREAMBLE, c->n_ids) && !eng_push_ids(c, pre, np)))
        c->turns[c->n_turns - 1].len = np;
    if (ok && (ok = !eng_push_turn(c, ROLE_USER, c->n_ids) && !eng_push_ids(c, m, nm)))
        c->turns[c->n_turns - 1].len = nm;
    if (!ok || eng_forward(e, c, c->ids + cached, c->n_ids - cached, eng_next(e, 0))) {
        /* the message leaves no trace: the cache kept its length, the conversation drops it again
         */
        c->n_turns = turns_before;
        c->n_ids = ids_before;
        goto out;
    }
    c->needed += c->n_ids;
    c->served += cached;
    ev_emit_prefill(e->lm->bus, c->id,
                    &(ev_prefill){.ids = c->ids + cached,
                                  .n_ids = c->n_ids - cached,
                                  .cached = cached,
                                  EV_OPT(preamble, np),
                                  EV_OPT(ms, (ev_clock() - t0) * 1e3)});
    rc = 0;
out:
    free(pre);
    free(msg);
    return rc;
}

/* the reply's text that may be shown now, to the on_text callback */
static void show(engine *e, const conv *c, stop_text *st, int final)
{
    size_t n;
    const char *text = stop_ready(st, final, &n);
    if (e->on_text && n)
        e->on_text(e->text_ctx, c->id, text, n);
}

/* generates the reply to what the window ends with; *n_tok gets the tokens it kept, which no
 * window position can tell once an eviction inside the reply has moved them */
static int eng_reply(engine *e, conv *c, char **out, int *n_tok)
{
    loaded_model *lm = e->lm;
    /* fixed for the whole reply: a /set meanwhile waits for its end (engine_set_sampling) */
    int eos = tok_eos(lm->tok), rc = 0, made = 0, n_predict = e->mo.n_predict, stopped = 0,
        probed = 0;
    stop_text st;
    stop_init(&st, tpl_stop(e->o.tpl));
    tok_stream ts;
    tok_stream_init(&ts, lm->tok);
    if (eng_push_turn(c, ROLE_ASSISTANT, c->n_ids))
        return -1;
    int turn = c->n_turns - 1;
    set_busy(c, 1);
    if (e->o.prepare)
        evict_follow_begin(c, &e->rule, n_predict);
    while (made < n_predict && !atomic_load(&e->cancel)) {
        double t0 = ev_clock();
        if (e->o.fidelity > 0 && made > 0 && made % e->o.fidelity == 0)
            fid_check(&e->fid, e->lm, c, e->rule.window);
        if (e->on_logits) {
            if ((rc = gpt2_last_logits(&lm->model, e->logits)))
                break;
            e->on_logits(e->logits_ctx, e->logits, lm->model.cfg.vocab_size);
        }
        /* e->next came from a drafter when its round has more after it */
        int id = made < e->n_forced ? e->forced[made] : e->next,
            drafted = e->spec && spec_queued(e->spec) > 0;
        int end = id == eos;
        if (end && !tpl_keeps_eos(e->o.tpl))
            break;
        if ((rc = make_room(e, c, 1, 0, 1)))
            break;
        turn = c->n_turns - 1; /* an eviction may have renumbered the turns */
        if ((rc = eng_push_ids(c, &id, 1)))
            break;
        c->turns[turn].len++;
        made++;
        int room = end ? 1 : round_room(e, c, made, n_predict);
        if (e->spec && (spec_queued(e->spec) || room > 1)) {
            if ((rc = spec_step(e, c, room)))
                break;
        } else if ((rc = read_step(e, c, &id, end ? ENG_NOTHING : eng_next(e, made)))) {
            break;
        }
        probed += e->o.attention > 0;
        evict_follow(c, lm, &e->rule);
        size_t len = 0;
        const char *piece = end ? "" : tok_stream_push(&ts, id, &len);
        ev_emit_token(lm->bus, c->id,
                      &(ev_token){.id = id,
                                  EV_OPT(ms, (ev_clock() - t0) * 1e3),
                                  EV_OPT(text, len ? piece : ""),
                                  .text_len = len,
                                  .drafted = drafted,
                                  .has_drafted = drafted});
        if (e->o.attention > 0 && e->reading.steps >= e->o.attention)
            rd_tell(&e->reading, lm->bus, c->id);
        if (end)
            break;
        int drop = 0;
        if ((stopped = stop_push(&st, piece, len, &drop)) < 0) {
            rc = -1;
            break;
        }
        if (stopped) { /* the window goes back to before the stop text */
            rc = eng_spec_unwind(e, c) || eng_rollback(c, c->n_ids - drop) ? -1 : 0;
            made -= drop;
            break;
        }
        show(e, c, &st, 0);
    }
    if (eng_spec_unwind(e, c)) /* drafts kept past where the reply stopped */
        rc = -1;
    set_busy(c, 0);
    evict_follow_end(c);
    rd_tell(&e->reading, lm->bus, c->id); /* the reply's last steps */
    if (win_reads(e->rule.policy))        /* the reading the next eviction goes by */
        win_fold_reading(c->turns, c->n_turns, probed, e->rule.policy);
    e->forced = NULL; /* one reply's worth */
    e->n_forced = 0;
    e->on_logits = NULL;
    if (!rc && stopped <= 0) {
        size_t len;
        const char *rest = tok_stream_flush(&ts, &len);
        rc = stop_finish(&st, rest, len);
    }
    if (!rc)
        show(e, c, &st, 1);
    tok_stream_free(&ts);
    *n_tok = made;
    c->last_used = ev_clock();
    char *text = rc ? NULL : stop_take(&st);
    stop_free(&st);
    if (!rc && !text)
        rc = -1;
    if (out && !rc)
        *out = text;
    else
        free(text);
    return rc;
}

/* Closes a turn whose reply kept n_tok tokens: the stats, then the closing record (everything
 * needed to resume the conversation exactly); the reply goes to *out when it succeeded and the
 * caller wants it. Returns rc. */
static int eng_turn_end(engine *e, conv *c, char *text, int n_tok, int rc, char **out)
{
    eng_stats(e, c);
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
                      .approximate = c->approximate,
                      .reads = e->rule.policy == WIN_LEAST_READ};
    rec_turn_end_emit(e->lm->bus, c->id, &t);
    c->turns_done++;
    c->settled = c->n_ids;
    if (out && !rc)
        *out = text;
    else
        free(text);
    return rc;
}

/* a turn, on the caller's thread or the worker's */
int eng_run_turn(engine *e, int id, const char *text, char **out)
{
    conv *c = eng_find(e, id);
    if (!c)
        return -1;
    if (out)
        *out = NULL;
    if (strlen(text) > ENGINE_MAX_MESSAGE)
        return err_set("a message of %zu bytes is longer than a message can be (%d KiB)",
                       strlen(text), ENGINE_MAX_MESSAGE / 1024);
    int latin1;
    char *msg = utf8_from_latin1(text, &latin1); /* what is recorded is what the model reads */
    if (!msg)
        return -1;
    ev_emit_user(e->lm->bus, c->id, &(ev_user){.text = msg});
    if (latin1)
        eng_latin1_notice(e, c->id, "the message", latin1);
    turn_room(e, c);
    offload_idle(e, c);
    c->last_used = ev_clock();
    set_busy(c, 1);
    int rc = user_turn(e, c, msg);
    set_busy(c, 0);
    free(msg);
    char *r = NULL;
    int n_tok = 0;
    if (!rc) {
        eng_stats(e, c);
        rc = eng_reply(e, c, &r, &n_tok);
    }
    return eng_turn_end(e, c, r, n_tok, rc, out);
}

/* the reply a retry replaces (its turn index), or -1 with the reason there is none */
int eng_retry_turn(const conv *c)
{
    int t = eng_last_turn(c, ROLE_ASSISTANT);
    if (t < 0 || t != c->n_turns - 1)
        return err_set("nothing to retry: the conversation does not end with a reply");
    /* a reply is drawn from the logits of the position before it: with nothing before it (evicted
     * by the reply itself), there is nothing to draw it from again */
    if (c->turns[t].start < 1)
        return err_set("cannot retry: the reply fills the window and what it answered was evicted "
                       "(raise --ctx)");
    return t;
}

int eng_run_retry(engine *e, int id, char **out)
{
    conv *c = eng_find(e, id);
    if (!c)
        return -1;
    int t = eng_retry_turn(c);
    if (t < 0)
        return -1;
    int to = c->turns[t].start;
    ev_emit_retry(e->lm->bus, c->id, &(ev_retry){0});
    double t0 = ev_clock();
    int rc = eng_rollback(c, to);
    if (!rc) {
        c->n_turns = t;
        /* the reply is drawn again from the logits of the position before it */
        rc = kv_truncate_told(c->seq, to - 1) || eng_forward(e, c, c->ids + to - 1, 1, ENG_DRAW)
                 ? -1
                 : 0;
    }
    char *r = NULL;
    int n_tok = 0;
    if (!rc) {
        ev_emit_prefill(e->lm->bus, c->id,
                        &(ev_prefill){.ids = c->ids + to - 1,
                                      .n_ids = 1,
                                      .cached = to - 1,
                                      EV_OPT(preamble, 0),
                                      EV_OPT(ms, (ev_clock() - t0) * 1e3)});
        rc = eng_reply(e, c, &r, &n_tok);
    }
    return eng_turn_end(e, c, r, n_tok, rc, out);
}

/* the first half of an edit: the last message and its reply rolled back */
conv *eng_edit_rollback(engine *e, int id)
{
    conv *c = eng_find_idle(e, id);
    if (!c)
        return NULL;
    int t = eng_last_turn(c, ROLE_USER);
    if (t < 0) {
        err_set("nothing to edit: the conversation has no message yet");
        return NULL;
    }
    ev_emit_edit(e->lm->bus, c->id, &(ev_edit){0});
    if (eng_rollback(c, c->turns[t].start))
        return NULL;
    c->n_turns = t;
    return c;
}
