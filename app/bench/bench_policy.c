/* kvchat bench --policy: which eviction rule keeps a small window's model closest to the model that
 * sees the whole conversation. Each conversation (bench_convs.h) runs in a window that holds all of
 * it, and in windows of fewer positions under each rule: oldest-first, sinks + recent (the kept
 * prefix 4 tokens past the preamble), least-read, last-read (the last reply's attention alone,
 * TOVA's rule at a turn's grain), a random turn (the control every rule must beat), an oracle
 * (each eviction tries every turn it may take first and takes the one after which the reply's loss
 * moves least: the bound), all exact, and shift (approximate). Replies are teacher-forced: the
 * held-out ones given, or those the whole-history run draws. At every reply token the rule's
 * next-token distribution is compared with the whole-history run's; over the tokens whose window
 * had lost history: the change in PPL, KL(full || rule) (mean, 95th percentile), top-1 agreement,
 * with bootstrap intervals over the conversations, and the cost. A recall conversation's last
 * reply is the answer to a question about an early turn: how many of its fill tokens (what only
 * that turn gives) were the most likely token. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../chat/engine.h"
#include "../files.h"
#include "bench.h"
#include "bench_convs.h"
#include "bench_oracle.h"
#include "bench_policy.h"
#include "bench_stats.h"

const char *const RULE[N_RULES] = {"never evicts", "oldest-first", "sinks+recent", "least-read",
                                   "last-read",    "random turn",  "oracle",       "shift"};
enum { SINK_TOKENS = 4 };

/* The window is recorded when it is not the last one with the token just taken appended: at each
 * reply's start and after an eviction. tests/reference/policy_ref.py rebuilds every token's. */
static int note_window(bench *b, run *r)
{
    int n;
    const int *w = engine_window(r->e, r->conv, &n);
    int k = r->k, last = k > 0 && k - 1 < b->n_ids ? b->ids[k - 1] : -1;
    int same = r->prev && n == r->n_prev + 1 &&
               !memcmp(w, r->prev, sizeof(int) * (size_t)r->n_prev) && w[n - 1] == last;
    json_t *to = r->rule == FULL ? b->full_windows : r->windows;
    if (!same) {
        json_t *ids = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(ids, json_integer(w[i]));
        json_array_append_new(to, json_pack("{s:i, s:o}", "at", r->at, "ids", ids));
    }
    int *p = realloc(r->prev, sizeof(int) * (size_t)(n ? n : 1));
    if (!p)
        return err_set("out of memory for bench --policy's windows");
    memcpy(p, w, sizeof(int) * (size_t)n);
    r->prev = p;
    r->n_prev = n;
    return 0;
}

/* the logits of each reply token, before the token goes in */
static void on_logits(void *ctx, const float *logits, int V)
{
    bench *b = ctx;
    run *r = b->active;
    int k = r->k, n;
    if (note_window(b, r) || k >= b->cap)
        return;
    int id = k < b->n_ids ? b->ids[k] : -1, scored = id >= 0 && id != b->eos, top;
    engine_window(r->e, r->conv, &n);
    full_token *f = &b->full[k];
    double *p_full = b->p_rows + (size_t)k * V, lse;
    if (r->rule == FULL) {
        bs_softmax(logits, V, p_full, &f->d);
        f->lp = scored ? logits[id] - f->d.lse : 0;
        f->len = n;
        top = f->d.top, lse = f->d.lse;
    } else {
        lse = bs_lse(logits, V, &top);
        double kl = bs_kl(p_full, &f->d, logits, lse, V);
        json_array_append_new(r->kl, json_real(kl));
        json_array_append_new(r->top1, json_boolean(top == f->d.top));
        bs_sums *s = &r->units[b->u];
        if (n < f->len) { /* this rule's window has lost part of the history */
            s->n++;
            s->top1 += top == f->d.top;
            s->kl += kl;
            bs_values_add(&r->kls, (float)kl, b->u);
            if (scored) {
                s->n_nll++;
                s->nll -= logits[id] - lse;
                s->nll_full -= f->lp;
            }
        }
    }
    if (scored)
        r->reply_nll -= logits[id] - lse;
    if (scored && b->is_fill[k]) {
        r->fills[b->u].n++;
        r->fills[b->u].top1 += top == id;
    }
    r->k++;
    r->at++;
}

static void on_event(void *ctx, json_t *ev)
{
    bench *b = ctx;
    run *r = b->active;
    if (ev_kind_of(ev) == EVK_EVICT) {
        conv_cost *s = &r->costs[b->u];
        double ms = json_real_value(json_object_get(ev, "ms"));
        s->evictions++;
        s->recomputed += json_integer_value(json_object_get(ev, "recomputed"));
        s->evict_ms += ms;
        r->worst_ms = ms > r->worst_ms ? ms : r->worst_ms;
    } else if (ev_kind_of(ev) == EVK_TOKEN && r->rule == FULL && !b->forced) {
        if (!err_grow(&b->ids, &b->ids_cap, (size_t)b->n_ids + 1, sizeof *b->ids, "ids"))
            b->ids[b->n_ids++] = (int)json_integer_value(json_object_get(ev, "id"));
    }
}

/* one turn of run r, with its own pool in place (an engine makes its sequences in lm->pool) */
static int run_turn(bench *b, run *r, const char *msg)
{
    loaded_model *lm = b->lm;
    kv_pool *was = lm->pool;
    lm->pool = r->pool;
    b->active = r;
    r->k = 0;
    r->reply_nll = 0;
    int given = r->rule != FULL || b->forced;
    engine_force_reply(r->e, given ? b->ids : NULL, given ? b->n_ids : 0, on_logits, b);
    char *reply = NULL;
    int rc = ev_subscribe(lm->bus, on_event, b) || engine_turn(r->e, r->conv, msg, &reply);
    ev_unsubscribe(lm->bus, on_event, b);
    free(reply);
    lm->pool = was;
    return rc ? -1 : 0;
}

/* a fresh engine and conversation for run r, on its pool */
static int run_begin(bench *b, run *r)
{
    loaded_model *lm = b->lm;
    kv_pool *was = lm->pool;
    lm->pool = r->pool;
    engine_free(r->e);
    r->e = engine_create(lm, &b->mo, &r->eo);
    r->conv = r->e ? engine_new_conv(r->e) : -1;
    lm->pool = was;
    free(r->prev);
    r->prev = NULL;
    r->n_prev = r->at = 0;
    json_decref(r->kl);
    json_decref(r->top1);
    json_decref(r->windows);
    r->kl = json_array();
    r->top1 = json_array();
    r->windows = json_array();
    return r->conv < 0 ? -1 : 0;
}

/* The ranks of the next eviction: random ones, or the oracle's; none for a conversation without
 * turns yet. */
static int set_ranks(bench *b, run *r, const char *msg, int message_tokens, double full_nll)
{
    int nt;
    engine_turns(r->e, r->conv, &nt);
    if (nt <= 0)
        return nt < 0 ? -1 : 0;
    float *ranks = malloc(sizeof(float) * (size_t)nt);
    if (!ranks)
        return err_set("out of memory for the ranks");
    oracle_turn o = {.lm = b->lm,
                     .mo = &b->mo,
                     .eo = &r->eo,
                     .kv = kv_pool_opts(r->pool),
                     .keep = b->keep,
                     .reply = b->ids,
                     .n_reply = b->n_ids,
                     .eos = b->eos};
    int rc = 0;
    if (r->rule == ORACLE)
        rc = oracle_ranks(&o, r->e, r->conv, msg, message_tokens, r->window, full_nll, ranks);
    for (int i = 0; r->rule == RANDOM && i < nt; i++) /* an LCG's high bits: the same on any host */
        ranks[i] =
            (float)((b->rng = b->rng * 6364136223846793005ull + 1442695040888963407ull) >> 40);
    rc = rc || engine_rank(r->e, r->conv, ranks, nt);
    free(ranks);
    return rc;
}

/* the tokens the next turn adds before its reply (the preamble with the first) */
static int turn_tokens(const bench *b, template_kind tpl, const char *msg, int first)
{
    int *ids = NULL, n = 0, cap = 0;
    if ((first && tpl_preamble(tpl, b->lm->tok, NULL, &ids, &n, &cap)) ||
        tpl_user(tpl, b->lm->tok, msg, strlen(msg), first, &ids, &n, &cap))
        n = -1;
    free(ids);
    return n;
}

/* a given reply's tokens as the template writes them, and its end */
static int given_reply(bench *b, template_kind tpl, const char *reply)
{
    size_t len = strlen(reply);
    char *text = malloc(len + 2);
    int *ids = NULL, n = 0, cap = 0;
    if (!text)
        return err_set("out of memory for a reply");
    snprintf(text, len + 2, "%s%s", tpl == TPL_GPT2 ? " " : "", reply);
    int rc = tok_encode(b->lm->tok, text, strlen(text), 0, &ids, &n, &cap);
    free(text);
    b->n_ids = 0;
    for (int i = 0; !rc && i <= n; i++)
        if (!(rc = err_grow(&b->ids, &b->ids_cap, (size_t)i + 1, sizeof *b->ids, "a reply")))
            b->ids[b->n_ids++] = i < n ? ids[i] : b->eos;
    free(ids);
    return rc;
}

/* a run's first user turn (the whole-history run's: a recall chat's fact), and whether another
 * run's window still holds all of it (a kept prefix that keeps its first tokens keeps no fact) */
static const win_turn *first_user_turn(const run *r)
{
    int n;
    const win_turn *t = engine_turns(r->e, r->conv, &n);
    for (int i = 0; i < n; i++)
        if (t[i].role == ROLE_USER)
            return &t[i];
    return NULL;
}

static int holds_turn(const run *r, const win_turn *whole)
{
    int n;
    const win_turn *t = engine_turns(r->e, r->conv, &n);
    for (int i = 0; whole && i < n; i++)
        if (t[i].no == whole->no)
            return t[i].len == whole->len;
    return 0;
}

/* One conversation in every run, turn by turn in step: the whole-history run first (its logits are
 * what the others are compared with), then each rule taking the same reply. */
static int conversation(bench *b, const bench_conv *c, template_kind tpl, int P, json_t *out)
{
    int rc = 0, turns = 0;
    for (int i = 0; i < b->n_runs && !rc; i++)
        rc = run_begin(b, &b->runs[i]);
    b->reply_ids = json_array();
    b->full_windows = json_array();
    run *full = &b->runs[FULL];
    b->forced = c->replies != NULL;
    for (int t = 0; t < c->n && !rc; t++, turns++) {
        const char *msg = c->msgs[t];
        int need = turn_tokens(b, tpl, msg, t == 0);
        if (need < 0 || (b->forced && given_reply(b, tpl, c->replies[t]))) {
            rc = -1;
            break;
        }
        memset(b->is_fill, 0, (size_t)b->cap);
        if (c->recall && t == c->n - 1) /* given_reply's text: the answer after its space */
            bench_conv_fill(b->lm->tok, c, b->ids, b->n_ids, tpl == TPL_GPT2, b->is_fill);
        if (!b->forced)
            b->n_ids = 0;
        if (engine_window_len(full->e, full->conv) + need + b->mo.n_predict + 1 > P)
            break; /* the whole-history run would evict */
        if ((rc = run_turn(b, full, msg)))
            break;
        /* a drawn reply that ended at <|endoftext|> took logits for it without emitting it */
        if (!b->forced && full->k > b->n_ids &&
            !(rc = err_grow(&b->ids, &b->ids_cap, (size_t)b->n_ids + 1, sizeof *b->ids, "ids")))
            b->ids[b->n_ids++] = b->eos;
        for (int i = 0; i < b->n_ids; i++)
            json_array_append_new(b->reply_ids, json_integer(b->ids[i]));
        for (int i = 1; i < b->n_runs && !rc; i++) {
            run *r = &b->runs[i];
            if ((r->rule == RANDOM || r->rule == ORACLE) &&
                (rc = set_ranks(b, r, msg, need, full->reply_nll)))
                break;
            if (!(rc = run_turn(b, r, msg)) && r->k != full->k)
                rc = err_set("the %s run took %d tokens of a %d-token reply", RULE[r->rule], r->k,
                             full->k);
        }
        int answer = c->recall && t == c->n - 1;
        const win_turn *fact = answer ? first_user_turn(full) : NULL;
        for (int i = 0; i < b->n_runs && answer && !rc; i++) {
            conv_cost *cc = &b->runs[i].costs[b->u];
            cc->asked = 1;
            cc->fact_evicted = !holds_turn(&b->runs[i], fact);
        }
    }
    if (!rc && !turns)
        rc = err_set("the model's %d positions hold no turn of conversation %d and its %d-token "
                     "replies",
                     P, b->u + 1, b->mo.n_predict);
    json_t *runs = json_array();
    for (int i = 1; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        json_array_append_new(runs,
                              json_pack("{s:s, s:i, s:b, s:o, s:o, s:o}", "rule", RULE[r->rule],
                                        "window", r->window, "approximate", r->rule == SHIFT, "kl",
                                        r->kl, "top1_same", r->top1, "windows", r->windows));
        r->kl = r->top1 = r->windows = NULL;
    }
    json_decref(full->kl);
    json_decref(full->top1);
    json_decref(full->windows);
    full->kl = full->top1 = full->windows = NULL;
    json_array_append_new(out, json_pack("{s:o, s:o, s:o}", "reply_ids", b->reply_ids,
                                         "full_windows", b->full_windows, "runs", runs));
    return rc;
}

static engine_opts rule_opts(const bench *b, int rule, template_kind tpl)
{
    /* evicting only when the next token does not fit: each rule keeps all the window holds */
    engine_opts eo = {.tpl = tpl, .keep = -1, .evict = EVICT_EXACT, .evict_at = WIN_AT_FULL};
    if (rule == SINKS)
        eo.keep = b->keep + SINK_TOKENS;
    else if (rule == LEAST || rule == LAST)
        eo.policy = rule == LEAST ? WIN_LEAST_READ : WIN_LAST_READ;
    else if (rule == RANDOM || rule == ORACLE)
        eo.policy = WIN_RANKED;
    else if (rule == SHIFT)
        eo.evict = EVICT_SHIFT;
    return eo;
}

static int open_runs(bench *b, const int *windows, int n_windows, int n_convs, template_kind tpl)
{
    loaded_model *lm = b->lm;
    b->n_runs = 1 + (N_RULES - 1) * n_windows;
    if (!(b->runs = calloc((size_t)b->n_runs, sizeof *b->runs)))
        return err_set("out of memory for bench --policy's runs");
    for (int i = 0; i < b->n_runs; i++) {
        run *r = &b->runs[i];
        r->rule = i ? 1 + (i - 1) % (N_RULES - 1) : FULL;
        r->window = i ? windows[(i - 1) / (N_RULES - 1)] : lm->model.cfg.n_ctx;
        r->eo = rule_opts(b, r->rule, tpl);
        kv_opts o = *kv_pool_opts(lm->pool);
        o.window = r->window;
        o.pool_bytes = 0;
        r->units = calloc((size_t)n_convs, sizeof *r->units);
        r->costs = calloc((size_t)n_convs, sizeof *r->costs);
        r->fills = calloc((size_t)n_convs, sizeof *r->fills);
        if (!r->units || !r->costs || !r->fills ||
            !(r->pool = kv_pool_create(lm->backend, &lm->model.cfg, &o, lm->bus)))
            return err_wrap("bench --policy's runs");
    }
    return 0;
}

static void close_runs(bench *b)
{
    for (int i = 0; b->runs && i < b->n_runs; i++) {
        run *r = &b->runs[i];
        kv_pool *was = b->lm->pool;
        b->lm->pool = r->pool;
        engine_free(r->e);
        b->lm->pool = was;
        kv_pool_free(r->pool);
        free(r->prev);
        free(r->units);
        free(r->costs);
        free(r->fills);
        bs_values_free(&r->kls);
        json_decref(r->kl);
        json_decref(r->top1);
        json_decref(r->windows);
    }
    free(b->runs);
}

/* the longest reply given, in tokens, and its end: every run's -n */
static int longest_reply(bench *b, const bench_conv *c, int n, template_kind tpl)
{
    int most = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; c[i].replies && t < c[i].n; t++) {
            if (given_reply(b, tpl, c[i].replies[t]))
                return -1;
            most = b->n_ids > most ? b->n_ids : most;
        }
    return most;
}

int bench_policy(loaded_model *lm, const model_opts *mo, const char *messages, const char *chats,
                 const char *recall, const char *gate_text, const char *gate_recall,
                 const char *json)
{
    const gpt2_config *cfg = &lm->model.cfg;
    int P = cfg->n_ctx, windows[2] = {P / 4, P / 2}, n_windows = 2, n_convs = 0, rc = -1;
    if (mo->kv.window)
        windows[0] = mo->kv.window, n_windows = 1;
    if (windows[0] >= P)
        return err_set("--ctx %d: bench --policy needs a window smaller than the model's %d "
                       "positions",
                       windows[0], P);
    bench_conv *convs = NULL;
    if (bench_convs_read(messages, chats, recall, &convs, &n_convs))
        return -1;
    const char *why;
    template_kind tpl = tpl_for_model(cfg, lm->dir, &why);
    bench b = {.lm = lm, .mo = *mo, .V = cfg->vocab_size, .eos = tok_eos(lm->tok), .rng = 1};
    int *pre = NULL, cap = 0;
    if (tpl_preamble(tpl, lm->tok, NULL, &pre, &b.keep, &cap)) {
        bench_convs_free(convs, n_convs);
        return -1;
    }
    free(pre);
    int longest = longest_reply(&b, convs, n_convs, tpl);
    if (longest > 0)
        b.mo.n_predict = longest;
    b.cap = b.mo.n_predict + 2;
    b.p_rows = malloc(sizeof(double) * (size_t)b.V * (size_t)b.cap);
    b.full = malloc(sizeof *b.full * (size_t)b.cap);
    b.is_fill = malloc((size_t)b.cap);
    json_t *out = json_array(), *rules = json_array(), *gates = json_array(),
           *model_gates = json_object();
    if (longest < 0 || !b.p_rows || !b.full || !b.is_fill) {
        if (longest >= 0)
            err_set("out of memory for bench --policy (%d reply tokens' logits)", b.cap);
        goto done;
    }
    if (open_runs(&b, windows, n_windows, n_convs, tpl))
        goto done;
    const char *from = messages ? messages : chats ? chats : recall;
    printf("%d conversation%s from %s", n_convs, n_convs == 1 ? "" : "s",
           from ? from : "the built-in chat");
    if (from)
        policy_print_file(from);
    else
        printf("\n");
    printf("the %s template; the replies %s (up to %d tokens), teacher-forced in every window;\n"
           "windows of %d",
           tpl_name(tpl), convs[0].replies ? "given" : "drawn by the run that never evicts",
           b.mo.n_predict, windows[0]);
    for (int w = 1; w < n_windows; w++)
        printf(" and %d", windows[w]);
    printf(" of the model's %d positions, by each rule\n", P);
    policy_gates mg;
    if ((rc = policy_gates_run(lm, gate_text, gate_recall, from, &mg, model_gates)))
        goto done;
    int bar = isatty(STDERR_FILENO);
    for (b.u = 0; b.u < n_convs && !rc; b.u++) {
        rc = conversation(&b, &convs[b.u], tpl, P, out);
        if (bar)
            fprintf(stderr, "\rbench --policy: conversation %d of %d ", b.u + 1, n_convs);
    }
    if (bar)
        fprintf(stderr, "\n");
    for (int w = 0; w < n_windows && !rc; w++)
        rc = policy_summary(&b, windows[w], n_convs, recall != NULL, &mg, rules, gates);
    if (!rc && json) {
        json_t *doc = json_pack("{s:s, s:i, s:O, s:O, s:O, s:O}", "model", lm->dir, "positions", P,
                                "conversations", out, "rules", rules, "gates", gates, "model_gates",
                                json_object_get(model_gates, "model_gates"));
        rc = json_dump_file(doc, json, JSON_COMPACT) ? err_set("--json %s: cannot write", json) : 0;
        json_decref(doc);
    }
done:
    close_runs(&b);
    json_decref(out);
    json_decref(rules);
    json_decref(gates);
    json_decref(model_gates);
    free(b.p_rows);
    free(b.full);
    free(b.is_fill);
    free(b.ids);
    bench_convs_free(convs, n_convs);
    return rc;
}
