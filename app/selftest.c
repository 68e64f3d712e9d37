#include "selftest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kernels/err.h"
#include "files.h"
#include "options.h"
#include "session/fingerprint.h"

/* A correct device differs from the CPU by rounding alone. f32: accumulation order (the CPU's
 * cached pass against recomputation measures ~5e-7). 16-bit: the GPU also rounds the activations
 * entering each product to the weight dtype, an error of the size of the weights' own rounding,
 * which on a 124M-shaped checkpoint moves the logits by 5.3e-3 (bf16) and 6.1e-4 (f16) relative L2
 * (kvchat generate --dump-logits, f32 against bf16/f16 weights): the limits leave about six times
 * that. */
double selftest_limit(dtype weights, dtype cache)
{
    /* q8, q4: decode steps agree as closely as f32 (the same integer products), but a GPU prefill
     * multiplies the dequantised weights with f32 activations where the CPU quantises them (2e-2
     * apart on random weights, tests/test_reference.sh) */
    double w = weights == DT_F32                      ? 1e-4
               : weights == DT_F16                    ? 5e-3
               : weights == DT_Q8 || weights == DT_Q4 ? 5e-2
                                                      : 3e-2;
    /* a 16-bit or int8 cache: both sides round the same keys and values, but those differ in their
     * last f32 bits, so now and then one rounds the other way (a 16-bit step in one element) */
    return cache != DT_F32 && w < 5e-3 ? 5e-3 : w;
}

double selftest_error(const float *x, const float *ref, int n)
{
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return sqrt(d / (r > 0 ? r : 1));
}

int selftest_against(loaded_model *lm, gpt2_model *ref, kb_backend *cpu, selftest_result *r)
{
    memset(r, 0, sizeof *r);
    const gpt2_config *c = &lm->model.cfg;
    dtype cache = kv_pool_opts(lm->pool)->type;
    r->limit = selftest_limit(lm->model.wtype, cache);
    /* A prefill, then STEPS decode steps: the second is recorded (a CUDA graph) and the rest replay
     * it while the window grows past position 128, where the fast decode attention's chunks of 64
     * positions (kernels/cuda/attention.cu) begin their third and the basic one's of 128 its
     * second: the reduction across chunks, the part most likely to be wrong, runs as users run it.
     */
    enum { STEPS = 12, MAX = 2 * 64 + 9 };
    int total = c->n_ctx < MAX ? c->n_ctx : MAX, prefill = total > STEPS ? total - STEPS : 1,
        V = c->vocab_size, ids[MAX];
    for (int i = 0; i < total;
         i++) /* a fixed prompt spread over the vocabulary; both sides are fed it */
        ids[i] = (int)((i * 7919u + 13u) % (unsigned)V);
    kv_opts ko;
    kv_opts_default(&ko, c);
    ko.window = total;
    ko.type = cache;
    kv_pool *pd = NULL, *pc = NULL;
    kv_seq *sd = NULL, *sc = NULL;
    float *ld = malloc(sizeof(float) * (size_t)V), *lc = malloc(sizeof(float) * (size_t)V);
    int rc = !ld || !lc || !(pd = kv_pool_create(lm->backend, c, &ko, NULL)) ||
                     !(pc = kv_pool_create(cpu, c, &ko, NULL)) || !(sd = kv_seq_new(pd, 0)) ||
                     !(sc = kv_seq_new(pc, 0))
                 ? -1
                 : 0;
    if (rc && (!ld || !lc))
        err_set("out of memory");
    /* the prefill, then one token a step: the decode kernels and the recorded steps are tested too
     */
    for (int at = 0, n = prefill; !rc && at < total; at += n, n = 1) {
        rc = gpt2_forward(&lm->model, lm->backend, sd, ids + at, n, ld) ||
                     gpt2_forward(ref, cpu, sc, ids + at, n, lc)
                 ? -1
                 : 0;
        double e = rc ? 0 : selftest_error(ld, lc, V);
        if (!rc && !(e <= r->worst)) /* NaN too */
            r->worst = isnan(e) ? INFINITY : e;
        r->steps += !rc;
    }
    kv_seq_free(sd);
    kv_seq_free(sc);
    kv_pool_free(pd);
    kv_pool_free(pc);
    free(ld);
    free(lc);
    r->passed = !rc && r->worst <= r->limit;
    return rc ? err_wrap("the GPU self-test") : 0;
}

int selftest_run(loaded_model *lm, selftest_result *r)
{
    kb_backend *cpu = kb_create("cpu", lm->backend->threads);
    gpt2_model ref;
    memset(&ref, 0, sizeof ref);
    int rc = !cpu || gpt2_load(&ref, lm->dir, lm->model.wtype, NULL) || gpt2_place(&ref, cpu, NULL)
                 ? err_wrap("the GPU self-test")
                 : selftest_against(lm, &ref, cpu, r);
    gpt2_free(&ref);
    if (cpu)
        cpu->destroy(cpu);
    return rc;
}

int selftest_key(loaded_model *lm, char *buf, size_t n)
{
    char dev[256], fp[17];
    if (!lm->backend->describe || lm->backend->describe(lm->backend, dev, sizeof dev) ||
        fp_model(lm->dir, fp))
        return -1;
    snprintf(buf, n, "%s | model %s | %s weights | %s cache | %s kernels", dev, fp,
             dt_name(lm->model.wtype), dt_name(kv_pool_opts(lm->pool)->type),
             kernels_name(lm->kernels));
    return 0;
}

static int cache_path(char *buf, size_t n)
{
    return xdg_path(buf, n, "XDG_CACHE_HOME", ".cache", "selftest.json",
                    "the self-test's verdicts are not kept");
}

/* the verdicts so far; a missing or damaged cache reads as empty (the test then runs again) */
static json_t *cache_read(const char *path)
{
    json_t *c = json_load_file(path, 0, NULL);
    if (!json_is_object(c)) {
        json_decref(c);
        c = json_object();
    }
    return c;
}

/* best effort: a verdict that cannot be kept only means the test runs again next time */
static void cache_store(const char *key, const selftest_result *r)
{
    char path[4096], when[32];
    if (cache_path(path, sizeof path) || make_parent_dirs(path))
        return;
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *c = cache_read(path);
    json_object_set_new(c, key,
                        json_pack("{s:b, s:f, s:f, s:i, s:s}", "passed", r->passed, "worst",
                                  isfinite(r->worst) ? r->worst : 1e300, "limit", r->limit, "steps",
                                  r->steps, "when", when));
    part_file out;
    if (!part_open(&out, path))
        part_commit(&out, !json_dumpf(c, out.f, JSON_INDENT(1) | JSON_SORT_KEYS));
    json_decref(c);
}

static int cache_lookup(const char *key, selftest_result *r)
{
    char path[4096];
    if (cache_path(path, sizeof path))
        return 0;
    json_t *c = cache_read(path), *v = json_object_get(c, key);
    int found = json_is_boolean(json_object_get(v, "passed")) &&
                json_is_number(json_object_get(v, "worst"));
    if (found)
        *r = (selftest_result){.worst = json_number_value(json_object_get(v, "worst")),
                               .limit = json_number_value(json_object_get(v, "limit")),
                               .steps = (int)json_integer_value(json_object_get(v, "steps")),
                               .passed = json_is_true(json_object_get(v, "passed")),
                               .cached = 1};
    json_decref(c);
    return found;
}

int selftest_candidates(const loaded_model *lm, const model_opts *o, kb_kernels *sets)
{
    sets[0] = o->kernels_set ? o->kernels : KB_KERNELS_FAST;
    sets[1] = KB_KERNELS_BASIC;
    return o->kernels_set || !lm->backend->use_kernels ? 1 : 2;
}

int selftest_verdict(loaded_model *lm, kb_kernels k, int use_cache, selftest_result *r)
{
    char key[700], dev[256] = "the GPU";
    use_kernels(lm, k);
    if (selftest_key(lm, key, sizeof key))
        return -1;
    if (use_cache && cache_lookup(key, r))
        return 0;
    if (use_cache) {
        lm->backend->describe(lm->backend, dev, sizeof dev);
        fprintf(
            stderr,
            "kvchat: first use of %s with this model: checking its %s kernels against the CPU\n",
            dev, kernels_name(k));
    }
    if (selftest_run(lm, r))
        return -1;
    cache_store(key, r);
    return 0;
}

int selftest_gate(loaded_model *lm, const model_opts *o)
{
    const char *env = getenv("KVCHAT_SELFTEST");
    char key[700], dev[256] = "the GPU", why[2][512];
    if ((env && !strcmp(env, "0")) || selftest_key(lm, key, sizeof key))
        return 0;
    lm->backend->describe(lm->backend, dev, sizeof dev);
    kb_kernels sets[2];
    int n = selftest_candidates(lm, o, sets);
    for (int i = 0; i < n; i++) {
        selftest_result r;
        if (selftest_verdict(lm, sets[i], 1, &r)) {
            snprintf(why[i], sizeof why[i], "%s", err_msg());
            continue;
        }
        if (r.passed) {
            if (i)
                fprintf(stderr,
                        "kvchat: %s: its fast kernels failed the self-test (%s); using its basic "
                        "kernels\n",
                        dev, why[0]);
            return 0;
        }
        snprintf(why[i], sizeof why[i],
                 "its %s logits with the %s kernels differ from the CPU's by %.3g (relative L2; a "
                 "correct GPU stays "
                 "under %.3g)%s",
                 dt_name(lm->model.wtype), kernels_name(sets[i]), r.worst, r.limit,
                 r.cached ? ", a cached verdict: `kvchat selftest` tests again" : "");
    }
    const char *last = why[n - 1];
    if (!strcmp(o->device, "cuda"))
        return err_set(
            "--device cuda: %s failed its self-test: %s; KVCHAT_SELFTEST=0 uses it anyway", dev,
            last);
    fprintf(stderr, "kvchat: %s failed its self-test (%s); running on the CPU\n", dev, last);
    model_opts on_cpu = *o;
    on_cpu.device = "cpu";
    unload_model(lm);
    return load_model(lm, &on_cpu);
}

int selftest_load(loaded_model *lm, const model_opts *o)
{
    if (load_model(lm, o))
        return -1;
    if (!o->skip_selftest && lm->backend->describe && selftest_gate(lm, o)) {
        unload_model(lm);
        return -1;
    }
    return 0;
}
