/* kvchat bench --policy: which eviction rule keeps a small window's model closest to the model that
 * sees the whole chat. One chat runs in a window that holds all of it (the replies are the model's
 * own, drawn there); the same chat, its replies teacher-forced, runs in a window of --ctx positions
 * by each rule. At every reply token the evicted run's next-token distribution is compared with the
 * whole-history run's: KL(full || evicted), and whether the most likely token is the same. The runs
 * go turn by turn in step, so only one reply's logits are held. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../chat/engine.h"
#include "bench.h"
#include "bench_stats.h"

/* The chat when no --messages file is given: plain requests, some of which ask after what an
 * earlier message said, so that with real weights what a rule dropped can matter. */
static const char *const BUILTIN[] = {
    "Hi! My name is Ada and I keep bees on a small farm near Lyon.",
    "I have eleven hives. Which flowers make the best honey?",
    "My sister Claire lives in Montreal and she hates the cold.",
    "Can you suggest a name for my oldest hive?",
    "What should I plant in spring along the edge of the field?",
    "I also play the cello in an orchestra on Tuesday evenings.",
    "Tell me a short story about a bee that learns music.",
    "What was my sister's name, and where does she live?",
    "How do beekeepers keep their hives alive through a hard winter?",
    "Remind me how many hives I said I have.",
    "Write two lines of a poem about honey and cellos.",
    "What is a good gift for someone who lives somewhere cold?",
    "Which of the things I told you about myself surprised you?",
    "How would you explain a cache to a beekeeper?",
    "Sum up everything you know about me in one sentence.",
    "Thanks! What should I do first tomorrow morning?",
};
enum { N_BUILTIN = sizeof BUILTIN / sizeof BUILTIN[0] };

enum { FULL, OLDEST, LEAST, N_RUNS };
static const char *const RULE[N_RUNS] = {"never evicts", "oldest-first", "least-read"};

/* one rule's run: its pool and engine, and what it measured */
typedef struct {
    kv_pool *pool;
    engine *e;
    int conv, evictions;
    int k;                 /* this reply's tokens so far: the index of its next logits */
    int at;                /* the chat's reply tokens so far */
    int *prev, n_prev;     /* the window at the last reply token */
    int compared, agreed;  /* reply tokens whose window is not the whole history's; top-1 same */
    double kl_sum, kl_max; /* over the compared tokens */
    int kl_max_at;
    int turn_compared, turn_agreed; /* this reply's */
    double turn_kl;
    double worst_top1; /* the lowest agreement of a reply with a compared token */
    json_t *kl, *top1, *windows;
} run;

/* what the turns share: the whole-history run's logits and tokens of the reply in progress */
typedef struct {
    loaded_model *lm;
    run runs[N_RUNS];
    int V, cap;           /* logits held: cap replies' tokens of V floats */
    float *logits;        /* the whole-history run's, one row per reply token */
    int *full_len;        /* its window at each of them */
    int *ids, n_ids;      /* the tokens it chose (each emitted token's id) */
    run *active;          /* whose turn it is */
    double *lp_full, *lp; /* log-softmax rows */
    json_t *reply_ids;
} bench;

/* The window is recorded when it is not the last one with the token just taken appended: at each
 * reply's start and after an eviction. A reader rebuilds every token's window from these and the
 * reply's ids (tests/reference/policy_ref.py does). */
static int note_window(bench *b, run *r)
{
    int n;
    const int *w = engine_window(r->e, r->conv, &n);
    int k = r->k, last = k > 0 && k - 1 < b->n_ids ? b->ids[k - 1] : -1;
    int same = r->prev && n == r->n_prev + 1 &&
               !memcmp(w, r->prev, sizeof(int) * (size_t)r->n_prev) && w[n - 1] == last;
    if (!same) {
        json_t *ids = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(ids, json_integer(w[i]));
        json_array_append_new(r->windows, json_pack("{s:i, s:o}", "at", r->at, "ids", ids));
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
    int k = r->k;
    if (note_window(b, r))
        return;
    if (r == &b->runs[FULL]) {
        if (k < b->cap) {
            memcpy(b->logits + (size_t)k * V, logits, sizeof(float) * (size_t)V);
            engine_window(r->e, r->conv, &b->full_len[k]);
        }
    } else if (k < b->cap) {
        int n;
        engine_window(r->e, r->conv, &n);
        const float *f = b->logits + (size_t)k * V;
        int same = bs_log_softmax(f, V, b->lp_full) == bs_log_softmax(logits, V, b->lp);
        double kl = bs_kl(b->lp_full, b->lp, V);
        json_array_append_new(r->kl, json_real(kl));
        json_array_append_new(r->top1, json_boolean(same));
        if (n < b->full_len[k]) { /* this rule's window has lost part of the history */
            r->turn_compared++;
            r->turn_agreed += same;
            r->turn_kl += kl;
            if (kl > r->kl_max || !r->compared) {
                r->kl_max = kl;
                r->kl_max_at = r->at;
            }
            r->compared++;
            r->agreed += same;
            r->kl_sum += kl;
        }
    }
    r->k++;
    r->at++;
}

static void on_event(void *ctx, json_t *ev)
{
    bench *b = ctx;
    run *r = b->active;
    if (ev_is(ev, EV_EVICT)) {
        r->evictions++;
    } else if (ev_is(ev, EV_TOKEN) && r == &b->runs[FULL]) {
        int *p = realloc(b->ids, sizeof(int) * (size_t)(b->n_ids + 1));
        if (!p)
            return;
        b->ids = p;
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
    r->turn_compared = r->turn_agreed = 0;
    r->turn_kl = 0;
    if (r != &b->runs[FULL])
        engine_force_reply(r->e, b->ids, b->n_ids, on_logits, b);
    else
        engine_force_reply(r->e, NULL, 0, on_logits, b);
    char *reply = NULL;
    int rc = ev_subscribe(lm->bus, on_event, b) || engine_turn(r->e, r->conv, msg, &reply);
    ev_unsubscribe(lm->bus, on_event, b);
    free(reply);
    lm->pool = was;
    return rc ? -1 : 0;
}

static int run_open(bench *b, run *r, int window, const engine_opts *eo, const model_opts *mo)
{
    loaded_model *lm = b->lm;
    kv_opts o = *kv_pool_opts(lm->pool);
    o.window = window;
    o.pool_bytes = 0;
    r->kl = json_array();
    r->top1 = json_array();
    r->windows = json_array();
    r->worst_top1 = 1;
    if (!(r->pool = kv_pool_create(lm->backend, &lm->model.cfg, &o, lm->bus)))
        return -1;
    kv_pool *was = lm->pool;
    lm->pool = r->pool;
    r->e = engine_create(lm, mo, eo);
    r->conv = r->e ? engine_new_conv(r->e) : -1;
    lm->pool = was;
    return r->conv < 0 ? -1 : 0;
}

static void run_close(bench *b, run *r)
{
    kv_pool *was = b->lm->pool;
    b->lm->pool = r->pool;
    engine_free(r->e);
    b->lm->pool = was;
    kv_pool_free(r->pool);
    free(r->prev);
    json_decref(r->kl);
    json_decref(r->top1);
    json_decref(r->windows);
}

/* the messages of --messages FILE (one a line, blank lines skipped), or the built-in chat's */
static int read_messages(const char *path, char ***out, int *n)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (path && !f)
        return err_set("--messages %s: %s", path, strerror(errno));
    char **m = NULL, *line = NULL;
    size_t cap = 0, line_cap = 0;
    ssize_t len;
    int rc = 0;
    *n = 0;
    for (int i = 0; !rc && (f ? (len = getline(&line, &line_cap, f)) >= 0 : i < N_BUILTIN); i++) {
        const char *text = f ? line : BUILTIN[i];
        if (f) {
            line[strcspn(line, "\r\n")] = 0;
            if (!line[strspn(line, " \t")])
                continue;
            if (strlen(line) > ENGINE_MAX_MESSAGE)
                rc = err_set("--messages %s: line %d is over %d bytes", path, i + 1,
                             ENGINE_MAX_MESSAGE);
        }
        if (!rc && !(rc = err_grow(&m, &cap, (size_t)*n + 1, sizeof *m, "the messages")) &&
            !(m[*n] = strdup(text)))
            rc = err_set("out of memory for the messages");
        *n += !rc;
    }
    if (!rc && f && ferror(f))
        rc = err_set("--messages %s: %s", path, strerror(errno));
    if (!rc && !*n)
        rc = err_set("--messages %s: no message in it (one a line)", path);
    if (f)
        fclose(f);
    free(line);
    if (rc) {
        for (int i = 0; i < *n; i++)
            free(m[i]);
        free(m);
        m = NULL;
    }
    *out = m;
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

static void print_summary(const bench *b, int turns, int tokens)
{
    printf("\n%d turns, %d tokens, %d of them reply tokens; over those whose window had lost some "
           "history:\n",
           turns, engine_window_len(b->runs[FULL].e, b->runs[FULL].conv), tokens);
    printf("rule          evictions  tokens   KL mean  KL worst  at token   top-1  worst reply's "
           "top-1\n");
    for (int i = OLDEST; i < N_RUNS; i++) {
        const run *r = &b->runs[i];
        if (!r->compared) {
            printf("%-12s  %9d  %6d  (its window never lost any history)\n", RULE[i], r->evictions,
                   0);
            continue;
        }
        printf("%-12s  %9d  %6d  %8.3g  %8.3g  %8d  %5.1f%%  %18.1f%%\n", RULE[i], r->evictions,
               r->compared, r->kl_sum / r->compared, r->kl_max, r->kl_max_at + 1,
               100.0 * r->agreed / r->compared, 100 * r->worst_top1);
    }
}

static int write_json(const bench *b, const char *path, int window)
{
    json_t *rules = json_array();
    for (int i = OLDEST; i < N_RUNS; i++) {
        const run *r = &b->runs[i];
        json_array_append_new(
            rules,
            json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:O, s:O, s:O}", "rule", RULE[i],
                      "evictions", r->evictions, "compared", r->compared, "kl_mean",
                      r->compared ? r->kl_sum / r->compared : 0, "kl_max", r->kl_max, "top1",
                      r->compared ? (double)r->agreed / r->compared : 1, "worst_reply_top1",
                      r->worst_top1, "kl", r->kl, "top1_same", r->top1, "windows", r->windows));
    }
    json_t *doc = json_pack("{s:s, s:i, s:i, s:O, s:O, s:o}", "model", b->lm->dir, "window", window,
                            "positions", b->lm->model.cfg.n_ctx, "reply_ids", b->reply_ids,
                            "full_windows", b->runs[FULL].windows, "rules", rules);
    int rc = json_dump_file(doc, path, JSON_COMPACT) ? err_set("--json %s: cannot write", path) : 0;
    json_decref(doc);
    return rc;
}

/* one turn of every run: the whole-history run draws the reply, the others take it */
static int one_turn(bench *b, const char *msg, int turn)
{
    b->n_ids = 0;
    for (int i = 0; i < N_RUNS; i++)
        b->runs[i].k = 0;
    if (run_turn(b, &b->runs[FULL], msg))
        return -1;
    for (int i = 0; i < b->n_ids; i++)
        json_array_append_new(b->reply_ids, json_integer(b->ids[i]));
    /* a reply that ended at <|endoftext|> took logits for it without emitting it */
    if (b->runs[FULL].k > b->n_ids) {
        int *p = realloc(b->ids, sizeof(int) * (size_t)(b->n_ids + 1));
        if (!p)
            return err_set("out of memory");
        b->ids = p;
        b->ids[b->n_ids++] = tok_eos(b->lm->tok);
        json_array_append_new(b->reply_ids, json_integer(-1));
    }
    int n_full = b->runs[FULL].k;
    printf("%4d  %6d  %6d", turn + 1, engine_window_len(b->runs[FULL].e, b->runs[FULL].conv),
           n_full);
    for (int i = OLDEST; i < N_RUNS; i++) {
        run *r = &b->runs[i];
        if (run_turn(b, r, msg))
            return -1;
        if (r->k != n_full)
            return err_set("the %s run took %d tokens of a %d-token reply", RULE[i], r->k, n_full);
        printf("  %6d", engine_window_len(r->e, r->conv));
        if (r->turn_compared) {
            double a = (double)r->turn_agreed / r->turn_compared;
            r->worst_top1 = a < r->worst_top1 ? a : r->worst_top1;
            printf("  %8.3g  %5.1f%%", r->turn_kl / r->turn_compared, 100 * a);
        } else {
            printf("  %8s  %6s", "-", "-");
        }
    }
    printf("\n");
    fflush(stdout);
    return 0;
}

int bench_policy(loaded_model *lm, const model_opts *mo, const char *messages, const char *json)
{
    const gpt2_config *cfg = &lm->model.cfg;
    int positions = cfg->n_ctx, window = mo->kv.window ? mo->kv.window : positions / 4;
    char **msgs = NULL;
    int n_msgs = 0;
    if (read_messages(messages, &msgs, &n_msgs))
        return -1;
    if (window >= positions) {
        for (int i = 0; i < n_msgs; i++)
            free(msgs[i]);
        free(msgs);
        return err_set("--ctx %d: bench --policy needs a window smaller than the model's %d "
                       "positions",
                       window, positions);
    }
    bench b = {.lm = lm, .V = cfg->vocab_size, .cap = mo->n_predict + 2};
    b.logits = malloc(sizeof(float) * (size_t)b.V * (size_t)b.cap);
    b.full_len = malloc(sizeof(int) * (size_t)b.cap);
    b.lp_full = malloc(sizeof(double) * (size_t)b.V);
    b.lp = malloc(sizeof(double) * (size_t)b.V);
    b.reply_ids = json_array();
    const char *why;
    engine_opts eo = {.tpl = tpl_for_model(cfg, lm->dir, &why),
                      .keep = -1,
                      .evict = EVICT_EXACT,
                      .evict_at = WIN_AT_TURN};
    engine_opts least = eo;
    least.policy = WIN_LEAST_READ;
    least.attention = ENGINE_ATTENTION_EVERY;
    int rc = !b.logits || !b.full_len || !b.lp_full || !b.lp
                 ? err_set("out of memory for bench --policy (%d reply tokens' logits)", b.cap)
                 : 0;
    rc = rc || run_open(&b, &b.runs[FULL], positions, &eo, mo) ||
         run_open(&b, &b.runs[OLDEST], window, &eo, mo) ||
         run_open(&b, &b.runs[LEAST], window, &least, mo);
    if (!rc) {
        printf("One chat: %s messages, the %s template, replies of up to %d tokens that the "
               "model draws (temp %g,\n"
               "seed %llu) in a window holding all of it; then the same chat, its replies "
               "teacher-forced, in a window\n"
               "of %d positions by each rule. Per turn and rule: the window's tokens, and "
               "KL(full || evicted) and\n"
               "top-1 agreement over the reply tokens whose window had lost some history.\n\n",
               messages ? messages : "built-in", tpl_name(eo.tpl), mo->n_predict, mo->sp.temp,
               (unsigned long long)mo->sp.seed, window);
        printf("turn  tokens   reply  oldest   KL mean   top-1   least   KL mean   top-1\n");
    }
    int turns = 0, tokens = 0;
    for (int t = 0; !rc; t++) {
        const char *msg = msgs[t % n_msgs];
        if (messages && t == n_msgs)
            break;
        int need = turn_tokens(&b, eo.tpl, msg, t == 0);
        if (need < 0) {
            rc = -1;
            break;
        }
        if (engine_window_len(b.runs[FULL].e, b.runs[FULL].conv) + need + mo->n_predict + 1 >
            positions) {
            if (messages && t < n_msgs)
                printf("(messages %d-%d left out: the whole-history run would overflow the model's "
                       "%d positions)\n",
                       t + 1, n_msgs, positions);
            break;
        }
        rc = one_turn(&b, msg, t);
        turns++;
        tokens += b.runs[FULL].k;
    }
    if (!rc && !turns)
        rc = err_set("the model's %d positions hold no turn of this chat and its %d-token replies",
                     positions, mo->n_predict);
    if (!rc && b.runs[FULL].evictions)
        rc = err_set("the whole-history run evicted (%d times)", b.runs[FULL].evictions);
    if (!rc) {
        print_summary(&b, turns, tokens);
        if (json)
            rc = write_json(&b, json, window);
    }
    for (int i = 0; i < N_RUNS; i++)
        run_close(&b, &b.runs[i]);
    json_decref(b.reply_ids);
    free(b.logits);
    free(b.full_len);
    free(b.lp_full);
    free(b.lp);
    free(b.ids);
    for (int i = 0; i < n_msgs; i++)
        free(msgs[i]);
    free(msgs);
    return rc;
}
