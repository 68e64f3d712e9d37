/* kvchat bench: prefill and decode speed of this machine, as medians, with the weight bandwidth
 * that decode implies (decode at batch 1 streams every weight once per token). */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "bench.h"
#include "policy_control.h"
#include "../cmd/commands.h"
#include "../options.h"
#include "../safe_text.h"
#include "../selftest.h"

#define MAX_POINTS 8

typedef struct {
    int prefill[MAX_POINTS], n_prefill, ctx[MAX_POINTS], n_ctx;
} bench_plan;

typedef struct {
    double prefill[MAX_POINTS],
        decode[MAX_POINTS];          /* median seconds: per prefill, per decoded token */
    double decode_wall[MAX_POINTS];  /* the same by the wall clock, host overheads included */
    double decode_step[MAX_POINTS];  /* the median single step: the steady state */
    double decode_first[MAX_POINTS]; /* the median first step after the context's prefill */
    int nodes;                       /* of a recorded decode step (0: none recorded) */
} figures;

/* One step of n tokens choosing the next as chat does (history: the first `seen` ids), and its
 * seconds: the device's own clock where the backend keeps one (CUDA events), else the wall clock;
 * wall: the wall clock always. */
static int timed_step(loaded_model *lm, kv_seq *c, const int *ids, int n, int seen, sampler *smp,
                      double *secs, double *wall)
{
    kb_backend *b = lm->backend;
    kb_sample pick = sampler_draw(smp, ids - (seen - n), seen);
    int next;
    double t0 = ev_clock();
    if (gpt2_step(&lm->model, b, c, ids, n, &pick, &next, NULL))
        return -1;
    *wall = ev_clock() - t0;
    *secs = b->step_seconds ? b->step_seconds(b) : *wall;
    return 0;
}

/* median seconds for a prefill of n tokens into an empty cache */
static int time_prefill(loaded_model *lm, kv_seq *c, const int *ids, int n, sampler *smp, int runs,
                        double *out)
{
    double t[65], wall;
    for (int r = 0; r <= runs; r++) { /* run 0 warms caches and page tables */
        kv_truncate(c, 0);
        if (timed_step(lm, c, ids, n, n, smp, &t[r], &wall))
            return -1;
    }
    *out = bench_median(t + 1, runs);
    return 0;
}

/* seconds per decoded token after a context of `ctx` tokens: each run's 16 steps timed together
 * (every slow step counts, the first after the context's prefill too, as in llama-bench's tg
 * figure), the median of the runs; the median single step (*out_step), what decoding settles to;
 * and the median first step (*out_first), what a reply's first token pays after its prompt. The
 * tokens fed are the fixed prompt's, so every dtype and backend runs the same positions. */
static int time_decode(loaded_model *lm, kv_seq *c, const int *ids, int ctx, sampler *smp, int runs,
                       double *out, double *out_wall, double *out_step, double *out_first)
{
    enum { STEPS = 16 };
    double t[65], w[65], first[65], step[64 * STEPS], dt, wall;
    int k = 0;
    for (int r = 0; r <= runs; r++) { /* run 0 warms caches and page tables */
        kv_truncate(c, 0);
        if (ctx && gpt2_forward(&lm->model, lm->backend, c, ids, ctx, NULL))
            return -1;
        t[r] = w[r] = 0;
        for (int s = 0; s < STEPS; s++) {
            if (timed_step(lm, c, ids + ctx + s, 1, ctx + s + 1, smp, &dt, &wall))
                return -1;
            t[r] += dt / STEPS;
            w[r] += wall / STEPS;
            if (s == 0)
                first[r] = dt;
            if (r)
                step[k++] = dt;
        }
    }
    *out = bench_median(t + 1, runs);
    *out_wall = bench_median(w + 1, runs);
    *out_step = bench_median(step, k);
    *out_first = bench_median(first + 1, runs);
    return 0;
}

static int bench_one(loaded_model *lm, const bench_plan *plan, const sampler_params *sp, int runs,
                     figures *f)
{
    const gpt2_config *cfg = &lm->model.cfg;
    int need = 16;
    for (int i = 0; i < plan->n_prefill; i++)
        need = plan->prefill[i] > need ? plan->prefill[i] : need;
    for (int i = 0; i < plan->n_ctx; i++)
        need = plan->ctx[i] + 16 > need ? plan->ctx[i] + 16 : need;
    if (need > kv_pool_opts(lm->pool)->window)
        return err_set("bench needs a context of %d tokens; this model has %d", need,
                       kv_pool_opts(lm->pool)->window);
    int *ids = malloc(sizeof *ids * (size_t)need);
    kv_seq *c = kv_seq_new(lm->pool, 0);
    sampler smp;
    sampler_init(&smp, sp);
    int rc = -1;
    if (!ids || !c)
        goto out;
    uint64_t s = 42;
    for (int i = 0; i < need; i++) { /* fixed pseudo-random prompt, the same for every dtype */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int)((s >> 33) % (uint64_t)cfg->vocab_size);
    }
    for (int i = 0; i < plan->n_prefill; i++)
        if (time_prefill(lm, c, ids, plan->prefill[i], &smp, runs, &f->prefill[i]))
            goto out;
    for (int i = 0; i < plan->n_ctx; i++)
        if (time_decode(lm, c, ids, plan->ctx[i], &smp, runs, &f->decode[i], &f->decode_wall[i],
                        &f->decode_step[i], &f->decode_first[i]))
            goto out;
    f->nodes = lm->backend->step_nodes ? lm->backend->step_nodes(lm->backend) : 0;
    rc = 0;
out:
    kv_seq_free(c);
    free(ids);
    return rc;
}

/* Where the device names its memory's peak bandwidth: the decode rate at which a step would only
 * read its bytes (every weight, and the cached keys and values of every earlier position), beside
 * each decode figure, and the graph's nodes per step. */
static void floor_row(loaded_model *lm, const bench_plan *plan, double weight_bytes,
                      const figures *f, json_t *row)
{
    double peak = lm->backend->peak_bandwidth;
    if (f->nodes)
        json_object_set_new(row, "graph_nodes_per_decode_step", json_integer(f->nodes));
    if (peak <= 0)
        return;
    json_object_set_new(row, "peak_bandwidth_gb_s", json_real(peak / 1e9));
    double floor[MAX_POINTS];
    printf("%-13s ", "floor");
    for (int i = 0; i < plan->n_prefill; i++)
        printf(" %13s", "");
    for (int i = 0; i < plan->n_ctx; i++) {
        char key[48];
        floor[i] = peak / (weight_bytes + (double)kv_bytes_per_token(lm->pool) * plan->ctx[i]);
        snprintf(key, sizeof key, "floor_decode_ctx%d_tok_s", plan->ctx[i]);
        json_object_set_new(row, key, json_real(floor[i]));
        printf(" %13.1f", floor[i]);
    }
    printf("  (at the peak %.0f GB/s)\n", peak / 1e9);
    if (f->nodes)
        printf("%-13s  a decode step is one graph of %d nodes (kernels and copies)\n", "",
               f->nodes);
    for (int i = 0; i < plan->n_ctx; i++)
        printf("%-13s  decode@%d: %.1f us a token, %.0f%% of the floor's rate\n", "", plan->ctx[i],
               f->decode[i] * 1e6, 100 / f->decode[i] / floor[i]);
}

static int parse_list(const char *flag, const char *v, int *out, int *n, int lo)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_POINTS || opt_int(flag, t, lo, 65536, &out[*n]))
            return err_set("%s: expected up to %d numbers separated by commas, got '%s'", flag,
                           MAX_POINTS, v);
        (*n)++;
    }
    return *n ? 0 : err_set("%s: empty list", flag);
}

/* whether flag was on the command line (as FLAG or FLAG=VALUE) */
static int given(int argc, char **argv, const char *flag)
{
    size_t n = strlen(flag);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], flag, n) && (!argv[i][n] || argv[i][n] == '='))
            return 1;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    static const char default_types[] = "f32,bf16,f16,q8,q4";
    const char *json_path = NULL, *dtypes = default_types;
    const char *messages = NULL, *text = NULL, *chats = NULL, *recall = NULL;
    const char *gate_text = NULL, *gate_recall = NULL; /* --policy's model gates' files */
    int control = 0;
    int runs = 5, mode = 0, docs = 24; /* mode 1: --turns, 2: --attention, 3: --policy, 4:
                                          --speculative */
    const char *drafters = "lookup,self-q8";
    draft_opts dopts;
    draft_opts_default(&dopts);
    bench_plan plan = {{128, 512}, 2, {0, 512}, 2};
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = opt_match(argc, argv, &i, NULL, "--dtype", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            dtypes = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--json", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            json_path = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--prefill", &v)) != 0) {
            if (r < 0 || parse_list("--prefill", v, plan.prefill, &plan.n_prefill, 1))
                return EXIT_USAGE;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--context", &v)) != 0) {
            if (r < 0 || parse_list("--context", v, plan.ctx, &plan.n_ctx, 0))
                return EXIT_USAGE;
        } else if (opt_match(argc, argv, &i, NULL, "--turns", NULL)) {
            mode = 1;
        } else if (opt_match(argc, argv, &i, NULL, "--attention", NULL)) {
            mode = 2;
        } else if (opt_match(argc, argv, &i, NULL, "--policy", NULL)) {
            mode = 3;
        } else if (opt_match(argc, argv, &i, NULL, "--speculative", NULL)) {
            mode = 4;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--draft", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            drafters = v;
        } else if ((r = draft_opts_parse(&dopts, argc, argv, &i)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--messages", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            messages = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--chats", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            chats = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--recall", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            recall = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--text", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            text = v;
        } else if (opt_match(argc, argv, &i, NULL, "--control", NULL)) {
            control = 1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--gate-text", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            gate_text = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--gate-recall", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            gate_recall = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--documents", &v)) != 0) {
            if (r < 0 || opt_int("--documents", v, 1, 100000, &docs))
                return EXIT_USAGE;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--runs", &v)) != 0) {
            if (r < 0 || opt_int("--runs", v, 1, 64, &runs))
                return EXIT_USAGE;
        } else if ((r = model_opts_parse(&mo, argc, argv, &i)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
        } else {
            return err_set("unknown option '%s' (see kvchat bench --help)", argv[i]), EXIT_USAGE;
        }
    }
    const char *track = messages ? "--messages"
                        : chats  ? "--chats"
                        : recall ? "--recall"
                        : text   ? "--text"
                                 : NULL;
    if (track && mode != 3 && !(mode == 4 && chats && !messages && !recall && !text))
        return err_set("%s: only with --policy", track), EXIT_USAGE;
    if ((gate_text || gate_recall || control) && mode != 3)
        return err_set("%s: only with --policy", control     ? "--control"
                                                 : gate_text ? "--gate-text"
                                                             : "--gate-recall"),
               EXIT_USAGE;
    if (gate_text && text)
        return err_set("--gate-text with --text: the text track's gate reads its own text"),
               EXIT_USAGE;
    if (!!messages + !!chats + !!recall + !!text > 1)
        return err_set("%s and %s: one track at a time", track,
                       text     ? "--text"
                       : recall ? "--recall"
                                : "--chats"),
               EXIT_USAGE;
    if (mode == 3 && mo.n_predict < 1)
        return err_set("-n %d: bench --policy compares reply tokens; give -n 1 or more",
                       mo.n_predict),
               EXIT_USAGE;
    if (mode != 4 && (given(argc, argv, "--draft") || given(argc, argv, "--draft-max") ||
                      given(argc, argv, "--draft-p-min")))
        return err_set("--draft, --draft-max, --draft-p-min: only with --speculative"), EXIT_USAGE;
    if (mode == 4 && !given(argc, argv, "--temp"))
        mo.sp.temp = 0; /* greedy: the replies are compared */
    if (mode == 4 && !given(argc, argv, "-n") && !given(argc, argv, "--max-tokens") &&
        !given(argc, argv, "--n-predict"))
        mo.n_predict = 128;
    if (mode) {
        static const char *const names[] = {"", "--turns", "--attention", "--policy",
                                            "--speculative"};
        const char *name = names[mode];
        loaded_model lm;
        mo.wtype_set |= dtypes != default_types;
        if (dtypes != default_types && (dt_parse(dtypes, &mo.wtype) || mo.wtype == DT_I8))
            return err_set("--dtype: with %s, one of f32, bf16, f16, q8", name), EXIT_USAGE;
        if (selftest_load(&lm, &mo))
            return EXIT_RUNTIME;
        policy_track track_of = {messages, chats, recall, text, gate_text, gate_recall, docs};
        char dir[4 * PATH_MAX]; /* shown as text: a folder's name may hold escape sequences */
        printf("kvchat bench %s: %s, %s weights, %s cache, %s, %d threads\n\n", name,
               safe_copy(dir, sizeof dir, lm.dir), dt_name(lm.model.wtype),
               dt_name(kv_pool_opts(lm.pool)->type), lm.backend->name, lm.backend->threads);
        int rc = mode == 1   ? bench_turns(&lm, &mo, json_path)
                 : mode == 2 ? bench_reading(&lm, plan.ctx, plan.n_ctx, runs)
                 : mode == 4 ? bench_speculative(&lm, &mo, drafters, &dopts, chats, runs, json_path)
                 : control   ? policy_with_control(&lm, &mo, &track_of, json_path)
                             : policy_track_run(&lm, &mo, &track_of, json_path);
        rc = rc ? EXIT_RUNTIME : 0;
        unload_model(&lm);
        return rc;
    }
    dtype list[8];
    int n_types = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", dtypes);
    for (char *save = NULL, *tokn = strtok_r(buf, ",", &save); tokn;
         tokn = strtok_r(NULL, ",", &save)) {
        if (n_types == 8 || dt_parse(tokn, &list[n_types]) || list[n_types] == DT_I8)
            return err_set("--dtype: expected a list of f32, bf16, f16, q8, q4, got '%s'", dtypes),
                   EXIT_USAGE;
        n_types++;
    }
    if (!n_types)
        return err_set("--dtype: empty list"), EXIT_USAGE;
    json_t *results = json_array();
    int rc = 0;
    for (int k = 0; k < n_types && !rc; k++) {
        loaded_model lm;
        mo.wtype = list[k];
        mo.wtype_set = 1;
        if (selftest_load(&lm, &mo))
            return json_decref(results), EXIT_RUNTIME;
        if (k == 0) {
            const gpt2_config *c = &lm.model.cfg;
            char dir[4 * PATH_MAX];
            printf("kvchat bench: %s (%d layers x %d embd, %.1fM parameters), %s backend, %d "
                   "threads, median of %d, %s\n\n",
                   safe_copy(dir, sizeof dir, lm.dir), c->n_layer, c->n_embd,
                   gpt2_param_count(c) / 1e6, lm.backend->name, lm.backend->threads, runs,
                   lm.backend->step_seconds ? "device time (CUDA events)" : "wall clock");
            printf("weights cache ");
            for (int i = 0; i < plan.n_prefill; i++)
                printf(" prefill-%-5d", plan.prefill[i]);
            for (int i = 0; i < plan.n_ctx; i++)
                printf("  decode@%-5d", plan.ctx[i]);
            printf("  weights/token  bandwidth@%d\n", plan.ctx[0]);
            printf("              ");
            for (int i = 0; i < plan.n_prefill + plan.n_ctx; i++)
                printf(" %13s", "tok/s");
            printf("  %13s  %11s\n", "MB", "GB/s");
            fflush(stdout);
        }
        figures f;
        memset(&f, 0, sizeof f);
        if (bench_one(&lm, &plan, &mo.sp, runs, &f)) {
            rc = EXIT_RUNTIME;
        } else {
            double bytes = (double)gpt2_bytes_per_token(&lm.model);
            json_t *row = json_pack(
                "{s:s, s:s, s:s, s:i, s:s, s:f, s:I, s:f}", "dtype", dt_name(list[k]),
                "cache_dtype", dt_name(kv_pool_opts(lm.pool)->type), "backend", lm.backend->name,
                "layers", lm.model.cfg.n_layer, "timing",
                lm.backend->step_seconds ? "cuda-events" : "wall-clock", "weight_bytes_per_token",
                bytes, "cache_bytes_per_position", (json_int_t)kv_bytes_per_token(lm.pool),
                "bandwidth_gb_s", bytes / f.decode[0] / 1e9);
            printf("%-7s %-5s ", dt_name(list[k]), dt_name(kv_pool_opts(lm.pool)->type));
            for (int i = 0; i < plan.n_prefill; i++) {
                char key[48];
                snprintf(key, sizeof key, "prefill%d_tok_s", plan.prefill[i]);
                json_object_set_new(row, key, json_real(plan.prefill[i] / f.prefill[i]));
                printf(" %13.1f", plan.prefill[i] / f.prefill[i]);
            }
            for (int i = 0; i < plan.n_ctx; i++) {
                char key[48];
                snprintf(key, sizeof key, "decode_ctx%d_tok_s", plan.ctx[i]);
                json_object_set_new(row, key, json_real(1 / f.decode[i]));
                snprintf(key, sizeof key, "decode_ctx%d_wall_tok_s", plan.ctx[i]);
                json_object_set_new(row, key, json_real(1 / f.decode_wall[i]));
                snprintf(key, sizeof key, "decode_ctx%d_step_tok_s", plan.ctx[i]);
                json_object_set_new(row, key, json_real(1 / f.decode_step[i]));
                snprintf(key, sizeof key, "decode_ctx%d_first_ms", plan.ctx[i]);
                json_object_set_new(row, key, json_real(f.decode_first[i] * 1e3));
                printf(" %13.1f", 1 / f.decode[i]);
            }
            printf("  %13.1f  %11.1f\n", bytes / 1e6, bytes / f.decode[0] / 1e9);
            floor_row(&lm, &plan, bytes, &f, row);
            fflush(stdout);
            json_array_append_new(results, row);
        }
        unload_model(&lm);
    }
    if (!rc && json_path) {
        json_t *doc = json_pack("{s:s, s:i, s:o}", "model", mo.model_dir ? mo.model_dir : "",
                                "runs", runs, "results", results);
        if (json_dump_file(doc, json_path, JSON_INDENT(2))) {
            err_set("--json %s: cannot write", json_path);
            rc = EXIT_RUNTIME;
        }
        json_decref(doc);
    } else {
        json_decref(results);
    }
    return rc;
}
