/* kvchat selftest --cases: many comparisons of the device with the CPU in one process, the GPU
 * check's engine (tests/gpu/check.sh). One device backend (one CUDA context, cuBLAS loaded once)
 * serves every case, because on a GPU each process start costs seconds and the check has minutes.
 * Each case is a weight dtype, a cache layout and dtype and a kernel set: the CPU's logits of a
 * prefill and of each forced step are computed first, then the device's, and compared row by row;
 * then each side decodes greedily from the same prompt. A weight dtype's first case with each
 * kernel set also runs the first-use self-test (app/selftest.c) as users meet it. */
#include "selftest_cases.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../selftest.h"

typedef struct {
    const sc_plan *p;
    kb_backend *dev, *cpu;
    gpt2_model dm, cm; /* the model on the device and on the CPU, in the current weight dtype */
    int *ids;          /* the prompt, then the forced ids */
    int *greedy[2];    /* the ids each side chose (device, CPU) after the prompt */
    float *rows[2];    /* each side's logits: the prefill's, then one row per forced step */
    sc_case ref;       /* what the CPU's rows and greedy ids are of, once have_ref */
    int have_ref;
    double ref_seconds;
    int passed, failed;
} sc_run;

static const char *layout_name(kv_layout l) { return l == KV_PAGED ? "paged" : "contiguous"; }

int sc_parse_case(const char *s, sc_case *c)
{
    char w[16], lay[16], cache[16], ks[16], extra;
    if (sscanf(s, "%15[^/]/%15[^/]/%15[^/]/%15[^/]%c", w, lay, cache, ks, &extra) != 4)
        return err_set(
            "--cases: '%s' is not WEIGHTS/LAYOUT/CACHE/KERNELS (e.g. bf16/paged/f32/fast)", s);
    if (dt_parse(w, &c->w) || c->w == DT_I8)
        return err_set("--cases: '%s': weights are f32, f16, bf16, q8 or q4, not '%s'", s, w);
    if (dt_parse(cache, &c->cache) || c->cache == DT_Q8 || c->cache == DT_Q4)
        return err_set("--cases: '%s': a cache is f32, f16, bf16 or int8, not '%s'", s, cache);
    if (strcmp(lay, "paged") && strcmp(lay, "contiguous"))
        return err_set("--cases: '%s': the layout is paged or contiguous, not '%s'", s, lay);
    if (strcmp(ks, "fast") && strcmp(ks, "basic"))
        return err_set("--cases: '%s': the kernels are fast or basic, not '%s'", s, ks);
    c->layout = strcmp(lay, "paged") ? KV_CONTIGUOUS : KV_PAGED;
    c->ks = strcmp(ks, "fast") ? KB_KERNELS_BASIC : KB_KERNELS_FAST;
    return 0;
}

/* The largest difference a correct device shows after a long forced run: the self-test's limit in
 * f32 and for q8 weights, and its bf16 limit wherever a 16-bit or int8 value is rounded (hundreds
 * of steps give a last-bit difference room to flip a rounding somewhere). */
static double forced_limit(const sc_case *c)
{
    double l = selftest_limit(c->w, c->cache);
    return c->w == DT_F32 && c->cache == DT_F32 ? l : l > 3e-2 ? l : 3e-2;
}

static void row(sc_run *r, const char *verdict, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void row(sc_run *r, const char *verdict, const char *name, const char *fmt, ...)
{
    r->passed += !strcmp(verdict, "ok");
    r->failed += !strcmp(verdict, "FAIL");
    printf("%s\t%s\t", verdict, name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout); /* the check reads the rows of a run it had to stop */
}

/* One side's run of case c: the forced rows into rows, the greedy ids into greedy. */
static int run_side(sc_run *r, gpt2_model *m, kb_backend *b, const sc_case *c, float *rows,
                    int *greedy)
{
    const sc_plan *p = r->p;
    int V = m->cfg.vocab_size, longest = p->force > p->greedy ? p->force : p->greedy;
    kv_opts ko;
    kv_opts_default(&ko, &m->cfg);
    ko.layout = c->layout;
    ko.type = c->cache;
    ko.window = p->prompt + longest + 1;
    kv_pool *pool = kv_pool_create(b, &m->cfg, &ko, NULL);
    kv_seq *s = pool ? kv_seq_new(pool, 0) : NULL;
    int rc = s ? gpt2_forward(m, b, s, r->ids, p->prompt, rows) : -1;
    for (int i = 0; !rc && i < p->force; i++)
        rc = gpt2_forward(m, b, s, r->ids + p->prompt + i, 1, rows + (size_t)(i + 1) * V);
    /* greedy from the same prompt: the choice made where each backend makes it */
    int *hist = rc ? NULL : malloc(sizeof(int) * (size_t)(p->prompt + p->greedy));
    if (!rc && !hist)
        rc = err_set("out of memory");
    if (!rc) {
        memcpy(hist, r->ids, sizeof(int) * (size_t)p->prompt);
        rc = kv_truncate(s, 0);
    }
    for (int i = 0, n = p->prompt, at = 0; !rc && i < p->greedy; i++) {
        kb_sample pick = {.temp = 0, .top_p = 1, .repeat_penalty = 1, .history = hist};
        pick.n_history = n;
        rc = gpt2_step(m, b, s, hist + at, n - at, &pick, &greedy[i], NULL);
        at = n;
        hist[n++] = greedy[i];
    }
    free(hist);
    kv_seq_free(s);
    kv_pool_free(pool);
    return rc;
}

static int same_case(const sc_case *a, const sc_case *b)
{
    return a->w == b->w && a->cache == b->cache && a->layout == b->layout;
}

static void compare(sc_run *r, const sc_case *c, const char *name, double seconds)
{
    const sc_plan *p = r->p;
    int V = r->dm.cfg.vocab_size, worst_row = 0;
    double worst = 0, limit = forced_limit(c);
    for (int i = 0; i <= p->force; i++) {
        double e = selftest_error(r->rows[0] + (size_t)i * V, r->rows[1] + (size_t)i * V, V);
        if (!(e <= worst)) { /* NaN too */
            worst = isnan(e) ? INFINITY : e;
            worst_row = i;
        }
    }
    char what[160];
    snprintf(what, sizeof what, "forced: %s", name);
    row(r, worst <= limit ? "ok" : "FAIL", what,
        "worst rel L2 %.2e at row %d of %d (limit %.0e); device %.2f s, CPU %.2f s", worst,
        worst_row, p->force + 1, limit, seconds, r->ref_seconds);
    if (!p->greedy)
        return;
    int same = 0;
    while (same < p->greedy && r->greedy[0][same] == r->greedy[1][same])
        same++;
    snprintf(what, sizeof what, "greedy %d: %s", p->greedy, name);
    if (same == p->greedy)
        row(r, "ok", what, "identical");
    else if (c->w == DT_F32 && c->cache == DT_F32)
        row(r, "FAIL", what, "the first %d of %d agree (f32: a tie is not expected)", same,
            p->greedy);
    else
        row(r, "info", what, "the first %d of %d agree (a near-tie may flip in 16 bits)", same,
            p->greedy);
}

/* The first-use self-test, on the warm backend, with the GPU's default cache (bf16). */
static int gate_test(sc_run *r, const sc_case *c)
{
    loaded_model lm = {.model = r->dm, .backend = r->dev, .kernels = c->ks};
    kv_opts ko;
    kv_opts_default(&ko, &r->dm.cfg);
    ko.type = DT_BF16;
    if (!(lm.pool = kv_pool_create(r->dev, &r->dm.cfg, &ko, NULL)))
        return -1;
    selftest_result st;
    double t0 = ev_clock();
    int rc = selftest_against(&lm, &r->cm, r->cpu, &st); /* the CPU copy the cases use */
    kv_pool_free(lm.pool);
    r->dm = lm.model; /* what the passes cached in the model (activations) stays its own */
    if (rc)
        return -1;
    char what[120];
    snprintf(what, sizeof what, "self-test: %s weights, bf16 cache, %s kernels", dt_name(c->w),
             kernels_name(c->ks));
    row(r, st.passed ? "ok" : "FAIL", what, "%d steps, worst rel L2 %.2e (limit %.0e); %.2f s",
        st.steps, st.worst, st.limit, ev_clock() - t0);
    return 0;
}

/* Loads the weights in dtype w on both sides (the previous dtype's are freed first). */
static int load_weights(sc_run *r, dtype w, const char *dir)
{
    gpt2_free(&r->dm);
    gpt2_free(&r->cm);
    double t0 = ev_clock();
    if (gpt2_load(&r->cm, dir, w, NULL) || gpt2_place(&r->cm, r->cpu, NULL))
        return -1;
    double t1 = ev_clock();
    if (gpt2_load(&r->dm, dir, w, NULL) || gpt2_place(&r->dm, r->dev, NULL))
        return -1;
    char what[80];
    snprintf(what, sizeof what, "load: %s weights", dt_name(w));
    row(r, "info", what, "CPU %.2f s, device %.2f s", t1 - t0, ev_clock() - t1);
    return 0;
}

static int run_cases(sc_run *r, const char *dir)
{
    const sc_plan *p = r->p;
    int tested[DT_Q4 + 1][2] = {{0}}; /* the self-test ran: by weights, kernels */
    for (int i = 0; i < p->n_cases; i++) {
        const sc_case *c = &p->cases[i];
        if ((i == 0 || c->w != p->cases[i - 1].w) && load_weights(r, c->w, dir))
            return -1;
        char name[120];
        snprintf(name, sizeof name, "%s weights, %s %s cache, %s kernels", dt_name(c->w),
                 layout_name(c->layout), dt_name(c->cache), kernels_name(c->ks));
        if (!r->have_ref || !same_case(&r->ref, c)) {
            double t0 = ev_clock();
            if (run_side(r, &r->cm, r->cpu, c, r->rows[1], r->greedy[1]))
                return err_wrap("%s, on the CPU", name);
            r->ref = *c;
            r->have_ref = 1;
            r->ref_seconds = ev_clock() - t0;
        }
        if (r->dev->use_kernels)
            r->dev->use_kernels(r->dev, c->ks);
        if (!p->no_gate && !tested[c->w][c->ks == KB_KERNELS_BASIC]++ && gate_test(r, c))
            return err_wrap("the self-test of %s", name);
        double t0 = ev_clock();
        if (run_side(r, &r->dm, r->dev, c, r->rows[0], r->greedy[0]))
            return err_wrap("%s, on the device", name);
        compare(r, c, name, ev_clock() - t0);
    }
    return 0;
}

int sc_run_plan(const model_opts *mo, const char *dir, const sc_plan *p)
{
    gpt2_config cfg;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (cfg_load(&cfg, path) || cfg_validate(&cfg))
        return -1;
    if (p->prompt + (p->force > p->greedy ? p->force : p->greedy) + 1 > cfg.n_ctx)
        return err_set("--prompt %d and --force %d/--greedy %d need more than the model's %d "
                       "positions",
                       p->prompt, p->force, p->greedy, cfg.n_ctx);
    sc_run r = {.p = p};
    double t0 = ev_clock();
    if (!(r.dev = kb_create(mo->device, mo->threads)))
        return -1;
    double up = ev_clock() - t0;
    char dev[256] = "";
    if (!r.dev->device_memory || !r.dev->describe || r.dev->describe(r.dev, dev, sizeof dev)) {
        r.dev->destroy(r.dev);
        return err_set("--cases: no GPU in use (--device %s); they compare a GPU with the CPU",
                       mo->device);
    }
    printf("%s\n", dev);
    row(&r, "info", "start: the device backend", "%.2f s (context, libraries, handles)", up);
    int rc = -1;
    if (!(r.cpu = kb_create("cpu", mo->threads)))
        goto out;
    size_t V = (size_t)cfg.vocab_size, n_ids = (size_t)(p->prompt + p->force);
    r.ids = malloc(sizeof(int) * n_ids);
    for (int s = 0; s < 2; s++) {
        r.rows[s] = malloc(sizeof(float) * V * (size_t)(p->force + 1));
        r.greedy[s] = calloc((size_t)p->greedy + 1, sizeof(int));
    }
    if (!r.ids || !r.rows[0] || !r.rows[1] || !r.greedy[0] || !r.greedy[1]) {
        err_set("out of memory for %d rows of logits", p->force + 1);
        goto out;
    }
    /* ids spread over the vocabulary, as the self-test's; the forced ones on another stride */
    for (size_t i = 0; i < n_ids; i++)
        r.ids[i] = (int)((i < (size_t)p->prompt ? i * 7919u + 13u : i * 104729u + 7u) % V);
    rc = run_cases(&r, dir);
    printf("%d passed, %d failed\n", r.passed, r.failed);
out:
    gpt2_free(&r.dm);
    gpt2_free(&r.cm);
    for (int s = 0; s < 2; s++) {
        free(r.rows[s]);
        free(r.greedy[s]);
    }
    free(r.ids);
    if (r.cpu)
        r.cpu->destroy(r.cpu);
    r.dev->destroy(r.dev);
    return rc ? -1 : r.failed ? 1 : 0;
}
