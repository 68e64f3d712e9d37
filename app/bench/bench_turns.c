/* kvchat bench --turns: what keeping the cache alive buys. Time to first token for each turn of a
 * conversation that grows to the full window (persistent cache vs re-prefilling the history, as a
 * stateless server does), what one eviction costs per cache layout, a chat that slides many times
 * with pauses between messages (evictions prepared while the user types, and not), and 1000 tokens
 * generated with and without a KV cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "bench.h"
#include "../chat/engine.h"

enum { USER_TOKENS = 48, REPLY_TOKENS = 16 };

typedef struct {
    size_t copied;
} copy_count;

static void count_copies(void *ctx, json_t *ev)
{
    long long copied = ev_kind_of(ev) == EVK_GROW  ? ev_grow_copied(ev)
                       : ev_kind_of(ev) == EVK_COW ? ev_cow_copied(ev)
                                                   : 0;
    ((copy_count *)ctx)->copied += (size_t)copied;
}

/* n tokens through the model, and the greedy choice of the next, made on the backend as chat makes
 * it; logits (may be NULL) also receives the last position's logits */
static int greedy(loaded_model *lm, kv_seq *s, const int *ids, int n, int *next, float *logits)
{
    const kb_sample pick = {.temp = 0, .top_p = 1, .repeat_penalty = 1};
    return gpt2_step(&lm->model, lm->backend, s, ids, n, &pick, next, logits);
}

/* a conversation of turns (48 user tokens + a 16-token greedy reply) until the window is nearly
 * full */
static int ttft_table(loaded_model *lm, int window, json_t *out)
{
    const gpt2_config *c = &lm->model.cfg;
    int *hist = malloc(sizeof(int) * (size_t)window), n = 0, rc = -1, next;
    kv_seq *live = kv_seq_new(lm->pool, 1), *fresh = kv_seq_new(lm->pool, 2);
    if (!hist || !live || !fresh)
        goto out;
    printf("Time to first token per turn (%d-token messages, %d-token replies)\n", USER_TOKENS,
           REPLY_TOKENS);
    printf("turn  history  persistent ms  x turn 1  stateless ms  x turn 1\n");
    double first_live = 0, first_fresh = 0;
    for (int turn = 1; n + USER_TOKENS + REPLY_TOKENS <= window; turn++) {
        int history = n;
        for (int i = 0; i < USER_TOKENS; i++)
            hist[n + i] = (int)((unsigned)(n + i) * 2654435761u % (unsigned)c->vocab_size);
        double t0 = ev_clock();
        if (greedy(lm, live, hist + n, USER_TOKENS, &next, NULL))
            goto out;
        double t_live = ev_clock() - t0;
        kv_truncate(fresh, 0);
        t0 = ev_clock();
        if (gpt2_forward(&lm->model, lm->backend, fresh, hist, n + USER_TOKENS, NULL))
            goto out;
        double t_fresh = ev_clock() - t0;
        n += USER_TOKENS;
        for (int r = 0; r < REPLY_TOKENS; r++) {
            hist[n] = next;
            if (greedy(lm, live, hist + n, 1, &next, NULL))
                goto out;
            n++;
        }
        if (turn == 1)
            first_live = t_live, first_fresh = t_fresh;
        printf("%4d  %7d  %13.1f  %8.2f  %12.1f  %8.2f\n", turn, history, t_live * 1e3,
               t_live / first_live, t_fresh * 1e3, t_fresh / first_fresh);
        fflush(stdout);
        json_array_append_new(out, json_pack("{s:i, s:i, s:f, s:f}", "turn", turn, "history",
                                             history, "ttft_persistent_ms", t_live * 1e3,
                                             "ttft_stateless_ms", t_fresh * 1e3));
    }
    rc = 0;
out:
    kv_seq_free(live);
    kv_seq_free(fresh);
    free(hist);
    return rc;
}

static int eviction_costs(loaded_model *lm, const model_opts *mo, int window, json_t *out)
{
    const gpt2_config *c = &lm->model.cfg;
    const char *names[3] = {"paged", "contiguous", "contiguous --prealloc"};
    int keep = 32, drop = window / 4, rc = 0, next;
    printf("\nOne eviction at a full window of %d (keep %d, drop %d, re-prefill %d), by layout\n",
           window, keep, drop, window - keep - drop);
    printf("layout                  grows  copied MB  peak MB  frag KB  evict ms  decode tok/s "
           "after\n");
    int *ids = malloc(sizeof(int) * (size_t)window);
    if (!ids)
        return err_set("out of memory");
    for (int i = 0; i < window; i++)
        ids[i] = (int)((unsigned)i * 2246822519u % (unsigned)c->vocab_size);
    for (int l = 0; l < 3 && !rc; l++) {
        kv_opts o = mo->kv;
        o.type = kv_pool_opts(lm->pool)->type;
        o.window = window;
        o.layout = l ? KV_CONTIGUOUS : KV_PAGED;
        o.prealloc = l == 2;
        ev_bus *bus = ev_bus_create();
        copy_count cc = {0};
        ev_subscribe(bus, count_copies, &cc);
        kv_pool *pool = kv_pool_create(lm->backend, c, &o, bus);
        kv_seq *s = pool ? kv_seq_new(pool, 1) : NULL;
        if (!s) {
            rc = -1;
            break;
        }
        for (int n = 0; n < window - 1 && !rc;
             n += 64) { /* fill as a conversation would: in turns */
            int k = window - 1 - n < 64 ? window - 1 - n : 64;
            rc = gpt2_forward(&lm->model, lm->backend, s, ids + n, k, NULL);
        }
        kv_pool_stats ps;
        kv_pool_get_stats(pool, &ps);
        size_t peak = ps.peak_bytes;
        kv_seq_stats st;
        kv_seq_get_stats(s, &st);
        double t0 = ev_clock();
        if (!rc)
            rc = kv_truncate(s, keep) ||
                 greedy(lm, s, ids + keep + drop, window - 1 - keep - drop, &next, NULL);
        double t_evict = ev_clock() - t0, steps[16];
        for (int i = 0; i < 16 && !rc; i++) {
            t0 = ev_clock();
            rc = greedy(lm, s, ids + i, 1, &next, NULL);
            steps[i] = ev_clock() - t0;
        }
        if (!rc) {
            double med = bench_median(steps, 16);
            printf("%-22s  %5d  %9.1f  %7.1f  %7.1f  %8.1f  %18.1f\n", names[l], st.grows,
                   cc.copied / 1e6, peak / 1e6, (st.reserved_bytes - st.used_bytes) / 1024.0,
                   t_evict * 1e3, 1 / med);
            fflush(stdout);
            json_array_append_new(
                out, json_pack("{s:s, s:i, s:I, s:I, s:I, s:f, s:f}", "layout", names[l], "grows",
                               st.grows, "copied_bytes", (json_int_t)cc.copied, "peak_bytes",
                               (json_int_t)peak, "fragmentation_bytes",
                               (json_int_t)(st.reserved_bytes - st.used_bytes), "evict_ms",
                               t_evict * 1e3, "decode_tok_s", 1 / med));
        }
        kv_pool_free(pool);
        ev_bus_free(bus);
    }
    free(ids);
    return rc;
}

/* what a sliding chat's events say: each reply token's time (the eviction it waited for included),
 * each turn's time to first token from its message (its eviction included) and whether it evicted,
 * the evictions */
typedef struct {
    double *token_ms, *ttft_ms, turn_t0;
    unsigned char *ttft_evicted;
    int tokens, turns, cap, evictions, prepared, waiting, evicted;
    double stall_ms;
} slide_log;

static void on_slide(void *ctx, json_t *ev)
{
    slide_log *l = ctx;
    if (ev_kind_of(ev) == EVK_TOKEN && l->tokens < l->cap) {
        l->token_ms[l->tokens++] = ev_token_ms(ev);
        if (l->waiting && l->turns < l->cap) {
            l->ttft_evicted[l->turns] = (unsigned char)l->evicted;
            l->ttft_ms[l->turns++] = (ev_clock() - l->turn_t0) * 1e3;
            l->waiting = 0;
        }
    } else if (ev_kind_of(ev) == EVK_EVICT) {
        l->evictions++;
        l->evicted |= l->waiting;
        l->prepared += ev_evict_prepared(ev);
        l->stall_ms += ev_evict_stall_ms(ev);
    }
}

static double largest(const double *v, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The two proportions a sliding chat is measured in: today's (48-token messages, 16-token replies,
 * the model's window) and replies that overflow (2-30 word messages, 48-token replies, --ctx 256). */
typedef struct {
    const char *name;
    int window, n_predict, words_min, words_max, turns;
} slide_case;

typedef struct {
    int evictions, prepared, history;
    double stall_ms, longest_gap, median_token, longest_ttft, median_ttft_plain;
} slide_result;

/* The shortest pause between a reply and the next message, in seconds: that of the paced chat that
 * found evictions stalling replies, and shorter than anyone reads a reply and types one. */
#define PAUSE_MIN_S 1.5

/* one chat of sc through the engine, with a pause after each turn once the window is half full */
static int one_chat(loaded_model *lm, const model_opts *mo, const slide_case *sc, win_when when,
                    int prepare, double pause, float *last, slide_result *out)
{
    model_opts m = *mo;
    m.n_predict = sc->n_predict;
    m.sp.temp = 0; /* greedy: prepared or not, each rule makes one chat */
    m.sp.repeat_penalty = 1;
    engine_opts eo = {
        .tpl = TPL_NONE, .keep = 0, .evict = EVICT_EXACT, .evict_at = when, .prepare = prepare};
    slide_log l = {.cap = sc->turns * (sc->n_predict + 1) + 16};
    l.token_ms = malloc(sizeof(double) * (size_t)l.cap);
    l.ttft_ms = malloc(sizeof(double) * (size_t)l.cap);
    l.ttft_evicted = malloc((size_t)l.cap);
    double *plain = malloc(sizeof(double) * (size_t)l.cap);
    engine *e =
        l.token_ms && l.ttft_ms && l.ttft_evicted && plain ? engine_create(lm, &m, &eo) : NULL;
    int conv = e ? engine_new_conv(e) : -1, rc = conv < 0 ? -1 : 0;
    if (!rc && ev_subscribe(lm->bus, on_slide, &l))
        rc = -1;
    for (int t = 0; t < sc->turns && !rc; t++) {
        char text[64 * 8 + 1] = "";
        int words = sc->words_min + (t * 7) % (sc->words_max - sc->words_min + 1);
        for (int k = 0; k < words; k++) /* " w<digit>" is about one token a word */
            snprintf(text + strlen(text), sizeof text - strlen(text), " %c%d", 'a' + (t + k) % 26,
                     (t * 7 + k) % 10);
        char *reply = NULL;
        l.turn_t0 = ev_clock();
        l.waiting = 1;
        l.evicted = 0;
        rc = engine_turn(e, conv, text, &reply);
        free(reply);
        if (!rc && engine_window_len(e, conv) > sc->window / 2)
            nanosleep(&(struct timespec){.tv_sec = (time_t)pause,
                                         .tv_nsec = (long)((pause - (time_t)pause) * 1e9)},
                      NULL);
    }
    ev_unsubscribe(lm->bus, on_slide, &l);
    const float *lg = rc ? NULL : engine_logits(e);
    if (lg)
        memcpy(last, lg, sizeof(float) * (size_t)lm->model.cfg.vocab_size);
    if (!rc) {
        int n_plain = 0;
        for (int i = 0; i < l.turns; i++)
            if (!l.ttft_evicted[i])
                plain[n_plain++] = l.ttft_ms[i];
        *out = (slide_result){.evictions = l.evictions,
                              .prepared = l.prepared,
                              .history = engine_window_len(e, conv),
                              .stall_ms = l.stall_ms,
                              .longest_gap = largest(l.token_ms, l.tokens),
                              .longest_ttft = largest(l.ttft_ms, l.turns),
                              .median_ttft_plain = n_plain ? bench_median(plain, n_plain) : 0};
        out->median_token = bench_median(l.token_ms, l.tokens);
    }
    engine_free(e);
    free(l.token_ms);
    free(l.ttft_ms);
    free(l.ttft_evicted);
    free(plain);
    return rc;
}

/* A chat through the engine that slides many times, in both proportions, by each rule of when to
 * evict (--evict-at turn and full), with --prepare-evict on and off: the evictions, the time
 * replies and first tokens waited for them, the longest gap between two reply tokens against the
 * median, the longest time to first token against a turn's without an eviction, the history left
 * at the end; and whether prepared and unprepared chats end on the same logits. The pause after
 * each turn, once the window is half full, is 1.25 re-prefills of what an eviction recomputes, and
 * at least PAUSE_MIN_S (a user reading and typing). */
static int slide_proportion(loaded_model *lm, const model_opts *mo, const slide_case *sc,
                            json_t *out)
{
    const gpt2_config *c = &lm->model.cfg;
    int V = c->vocab_size, recompute = sc->window - sc->window / 4 - sc->words_max, rc = 0;
    int *ids = malloc(sizeof(int) * (size_t)sc->window);
    float *last = malloc(sizeof(float) * (size_t)V * 2);
    kv_seq *s = kv_seq_new(lm->pool, 0);
    if (!ids || !last || !s) {
        kv_seq_free(s);
        free(ids);
        free(last);
        return err_set("out of memory for the sliding chat");
    }
    for (int i = 0; i < sc->window; i++)
        ids[i] = (int)((unsigned)i * 2654435761u % (unsigned)V);
    double t0 = ev_clock();
    rc = gpt2_forward(&lm->model, lm->backend, s, ids, recompute, NULL);
    double pause = 1.25 * (ev_clock() - t0);
    pause = pause > PAUSE_MIN_S ? pause : PAUSE_MIN_S;
    kv_seq_free(s);
    free(ids);
    printf("\nA sliding chat (%s): %d turns of %d-%d word messages and %d-token replies in a "
           "window of %d,\n"
           "a pause of %.0f ms (1.25 re-prefills of %d tokens, at least %.1f s) after each turn "
           "once the window is half full\n",
           sc->name, sc->turns, sc->words_min, sc->words_max, sc->n_predict, sc->window,
           pause * 1e3, recompute, PAUSE_MIN_S);
    printf("evict-at  prepare  evictions  prepared  stall ms  longest gap ms  / median  "
           "longest TTFT ms  / no-evict TTFT  history\n");
    for (int when = WIN_AT_TURN; when >= WIN_AT_FULL && !rc; when--)
        for (int on = 1; on >= 0 && !rc; on--) {
            slide_result r;
            rc = one_chat(lm, mo, sc, (win_when)when, on, pause, last + (size_t)V * on, &r);
            if (rc)
                break;
            const char *rule = when == WIN_AT_TURN ? "turn" : "full";
            printf("%-8s  %-7s  %9d  %8d  %8.1f  %14.1f  %8.1fx  %15.1f  %14.1fx  %7d\n", rule,
                   on ? "on" : "off", r.evictions, r.prepared, r.stall_ms, r.longest_gap,
                   r.longest_gap / r.median_token, r.longest_ttft,
                   r.median_ttft_plain > 0 ? r.longest_ttft / r.median_ttft_plain : 0, r.history);
            json_array_append_new(
                out, json_pack("{s:s, s:s, s:b, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:i, s:f}",
                               "proportion", sc->name, "evict_at", rule, "prepare", on, "evictions",
                               r.evictions, "prepared", r.prepared, "stall_ms", r.stall_ms,
                               "longest_gap_ms", r.longest_gap, "median_token_ms", r.median_token,
                               "longest_ttft_ms", r.longest_ttft, "median_ttft_no_evict_ms",
                               r.median_ttft_plain, "history_tokens", r.history, "pause_ms",
                               pause * 1e3));
            fflush(stdout); /* a row a minute or so: show each as it comes */
            if (!on)
                printf("          prepared and not, the chats end on the same logits: %s\n",
                       memcmp(last, last + V, sizeof(float) * (size_t)V)
                           ? "NO (a prepared eviction changed them)"
                           : "yes, bit for bit");
        }
    free(last);
    return rc;
}

static int sliding_chat(loaded_model *lm, const model_opts *mo, int window, json_t *out)
{
    enum { SLIDES = 4, OVERFLOW_WINDOW = 256 };
    int target = window / 4;
    slide_case cases[2] = {
        {"messages overflow", window, 16, 48, 48, window / 64 + SLIDES * (target / 64 + 1)},
        {"replies overflow", OVERFLOW_WINDOW, 48, 2, 30, 24},
    };
    int rc = slide_proportion(lm, mo, &cases[0], out);
    if (rc || window < OVERFLOW_WINDOW)
        return rc;
    kv_opts o = *kv_pool_opts(lm->pool); /* a pool of the small window for the second */
    o.window = OVERFLOW_WINDOW;
    o.pool_bytes = 0;
    kv_pool *big = lm->pool, *small = kv_pool_create(lm->backend, &lm->model.cfg, &o, lm->bus);
    if (!small)
        return -1;
    lm->pool = small;
    rc = slide_proportion(lm, mo, &cases[1], out);
    lm->pool = big;
    kv_pool_free(small);
    return rc;
}

/* 1000 tokens: decoded with the cache, versus recomputing the whole prefix for each (integrated
 * from measured prefix lengths, since running it in full takes minutes) */
static int thousand_tokens(loaded_model *lm, int window, json_t *out)
{
    const gpt2_config *c = &lm->model.cfg;
    int total = window < 1000 ? window : 1000, rc = 0, next;
    int *ids = malloc(sizeof(int) * (size_t)total);
    kv_seq *s = kv_seq_new(lm->pool, 3);
    if (!ids || !s)
        return err_set("out of memory");
    ids[0] = c->eos_id;
    double t0 = ev_clock();
    for (int i = 0; i < total && !rc; i++) {
        rc = greedy(lm, s, ids + i, 1, &next, NULL);
        if (i + 1 < total)
            ids[i + 1] = next;
    }
    double with_cache = ev_clock() - t0, without = 0, prev_t = 0;
    int prev_n = 0;
    for (int k = 1; k <= 10 && !rc; k++) { /* trapezoid over prefix lengths total/10 .. total */
        int n = total * k / 10;
        kv_truncate(s, 0);
        t0 = ev_clock();
        rc = greedy(lm, s, ids, n, &next, NULL);
        double t = ev_clock() - t0;
        without += (n - prev_n) * (t + (k == 1 ? t * 0.5 : prev_t)) / 2;
        prev_t = t;
        prev_n = n;
    }
    kv_seq_free(s);
    free(ids);
    if (rc)
        return -1;
    printf("\n%d tokens generated: %.2f s with the KV cache, about %.1f s without it (%.0fx; "
           "estimated from 10\n"
           "measured prefix lengths). nanoGPT, as reported: 12.85 s vs 49.37 s (3.8x).\n",
           total, with_cache, without, without / with_cache);
    json_object_set_new(out, "tokens", json_integer(total));
    json_object_set_new(out, "with_cache_s", json_real(with_cache));
    json_object_set_new(out, "without_cache_s_estimated", json_real(without));
    return 0;
}

/* each cache dtype against an f32 cache: logits after a 512-token prefill, and greedy agreement */
static int cache_dtypes(loaded_model *lm, const model_opts *mo, json_t *out)
{
    enum { PROMPT = 512, GEN = 128 };
    const gpt2_config *c = &lm->model.cfg;
    dtype types[4] = {DT_F32, DT_F16, DT_BF16, DT_I8};
    int V = c->vocab_size, ref_ids[GEN], rc = 0, id = 0;
    float *ref = malloc(sizeof(float) * V), *logits = malloc(sizeof(float) * V);
    int *ids = malloc(sizeof(int) * (PROMPT + GEN));
    if (!ref || !logits || !ids) {
        free(ref);
        free(logits);
        free(ids);
        return err_set("out of memory");
    }
    for (int i = 0; i < PROMPT; i++)
        ids[i] = (int)((unsigned)i * 2654435761u % (unsigned)V);
    printf("\nCache dtype vs f32 cache: logits after a %d-token prompt, and %d greedy tokens\n",
           PROMPT, GEN);
    printf("cache   bytes/token  rel L2 error  greedy tokens equal  first divergence\n");
    for (int t = 0; t < 4 && !rc; t++) {
        kv_opts o = mo->kv;
        o.window = PROMPT + GEN;
        o.type = types[t];
        o.pool_bytes = 0;
        kv_pool *pool = kv_pool_create(lm->backend, c, &o, NULL);
        kv_seq *s = pool ? kv_seq_new(pool, 1) : NULL;
        rc = !s || greedy(lm, s, ids, PROMPT, &id, logits);
        double num = 0, den = 0;
        if (t == 0)
            memcpy(ref, logits, sizeof(float) * V);
        for (int i = 0; i < V; i++) {
            num += (double)(logits[i] - ref[i]) * (logits[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        int same = 0, diverge = -1;
        for (int g = 0; g < GEN && !rc; g++) {
            if (t == 0)
                ref_ids[g] = id;
            same += id == ref_ids[g];
            if (id != ref_ids[g] && diverge < 0)
                diverge = g;
            ids[PROMPT + g] =
                ref_ids[g]; /* teacher-forced on the f32 tokens, so every position compares */
            rc = greedy(lm, s, ids + PROMPT + g, 1, &id, NULL);
        }
        if (!rc) {
            char where[16] = "none";
            if (diverge >= 0)
                snprintf(where, sizeof where, "token %d", diverge + 1);
            printf("%-6s  %11zu  %12.2e  %13d / %d  %16s\n", dt_name(types[t]),
                   kv_bytes_per_token(pool), sqrt(num / den), same, GEN, where);
            json_array_append_new(out, json_pack("{s:s, s:I, s:f, s:i, s:i}", "cache_dtype",
                                                 dt_name(types[t]), "bytes_per_token",
                                                 (json_int_t)kv_bytes_per_token(pool), "rel_l2",
                                                 sqrt(num / den), "greedy_equal", same, "of", GEN));
        }
        kv_pool_free(pool);
    }
    free(ref);
    free(logits);
    free(ids);
    return rc ? -1 : 0;
}

int bench_turns(loaded_model *lm, const model_opts *mo, const char *json_path)
{
    int window = kv_pool_opts(lm->pool)->window;
    json_t *ttft = json_array(), *evict = json_array(), *gen = json_object(),
           *dtypes = json_array();
    json_t *slide = json_array();
    int rc = ttft_table(lm, window, ttft) || eviction_costs(lm, mo, window, evict) ||
             sliding_chat(lm, mo, window, slide) || thousand_tokens(lm, window, gen) ||
             cache_dtypes(lm, mo, dtypes);
    if (!rc && json_path) {
        json_t *doc = json_pack("{s:o, s:o, s:o, s:o, s:o}", "ttft", ttft, "eviction", evict,
                                "sliding_chat", slide, "generate", gen, "cache_dtypes", dtypes);
        if (json_dump_file(doc, json_path, JSON_INDENT(2)))
            rc = err_set("--json %s: cannot write", json_path);
        json_decref(doc);
    } else {
        json_decref(ttft);
        json_decref(evict);
        json_decref(gen);
        json_decref(dtypes);
        json_decref(slide);
    }
    return rc ? -1 : 0;
}
