/* The forward pass with the KV cache against the same model run without it: decoding token by
 * token, or in chunks, must give the logits of one pass over the whole sequence. (The NumPy
 * reference test in tests/test_reference.sh checks the whole pass against an independent
 * implementation.) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/cmd/commands.h"
#include "../../kernels/cpu/cpu.h"
#include "../../kernels/err.h"
#include "../../model/gpt2.h"
#include "check.h"
#include "model_fixture.h"

static const char *model_dir(const char *dtype_name) { return fixture_model(dtype_name, 40); }

static void cache_equals_recompute(void)
{
    const char *types[3] = {"f32", "f16", "bf16"};
    kb_backend *b = kb_create("cpu", 2);
    for (int t = 0; t < 3; t++) {
        gpt2_model m;
        dtype dt;
        dt_parse(types[t], &dt);
        CHECK(gpt2_load(&m, model_dir(types[t]), dt, NULL) == 0, "load: %s", err_msg());
        int V = m.cfg.vocab_size, ids[30];
        for (int i = 0; i < 30; i++)
            ids[i] = (i * 7919 + 13) % V;
        kv_opts ko;
        kv_opts_default(&ko, &m.cfg);
        kv_pool *pool = kv_pool_create(b, &m.cfg, &ko, NULL);
        kv_seq *inc = kv_seq_new(pool, 0), *full = kv_seq_new(pool, 1);
        float *a = malloc(sizeof(float) * V), *r = malloc(sizeof(float) * V);
        double worst = 0;
        /* prefill 9 (GEMM path), then single tokens (streamed path), then a chunk of 5 */
        gpt2_forward(&m, b, inc, ids, 9, a);
        for (int n = 9; n <= 30; n++) {
            if (n > 9 && n <= 25)
                gpt2_forward(&m, b, inc, ids + n - 1, 1, a);
            else if (n == 30)
                gpt2_forward(&m, b, inc, ids + 25, 5, a);
            else
                continue;
            kv_truncate(full, 0);
            CHECK(gpt2_forward(&m, b, full, ids, n, r) == 0, "full pass: %s", err_msg());
            worst = fmax(worst, rel_err(a, r, V));
        }
        CHECK(kv_len(inc) == 30, "cache length %d", kv_len(inc));
        CHECK(worst < 1e-5, "%s: cached vs recomputed rel err %.3g", types[t], worst);
        CHECK(gpt2_forward(&m, b, inc, ids, 11, a) == -1 && strstr(err_msg(), "exceed the"),
              "overflowing the context was not refused: %s", err_msg());
        int bad = V;
        CHECK(gpt2_forward(&m, b, full, &bad, 1, a) == -1 &&
                  strstr(err_msg(), "outside the vocabulary"),
              "bad id accepted");
        free(a);
        free(r);
        kv_pool_free(pool);
        gpt2_free(&m);
    }
    b->destroy(b);
}

static void load_errors(void)
{
    gpt2_model m;
    char missing[4200], want[4300]; /* a path of the run's own that nothing made */
    snprintf(missing, sizeof missing, "%s/missing-model", temp_dir());
    snprintf(want, sizeof want, "%s/config.json", missing);
    CHECK(gpt2_load(&m, missing, DT_F32, NULL) == -1 && strstr(err_msg(), want), "missing dir: %s",
          err_msg());
    /* f16 file loaded as f32 and as bf16: conversions happen, shapes still check */
    CHECK(gpt2_load(&m, model_dir("f16"), DT_BF16, NULL) == 0, "f16 as bf16: %s", err_msg());
    CHECK(m.wtype == DT_BF16 && m.file_type == DT_F16, "types recorded");
    gpt2_free(&m);
}

/* A backend that records steps (CUDA graphs) may say a recording failed and nothing ran: the
 * forward pass must issue that step again. This one says so the first time of every step. */
static int issued, ends;
static int (*cpu_embed_op)(kb_backend *, float *, const int *, int, int, const kb_mat *,
                           const kb_mat *);

static int counting_embed(kb_backend *b, float *x, const int *ids, int n, int pos0,
                          const kb_mat *wte, const kb_mat *wpe)
{
    issued++;
    return cpu_embed_op(b, x, ids, n, pos0, wte, wpe);
}

static int step_begin(kb_backend *b, const kb_step *s, int *replayed)
{
    (void)b, (void)s;
    *replayed = 0;
    return 0;
}

static int step_end_fails_first(kb_backend *b, int ok)
{
    (void)b, (void)ok;
    return ends++ % 2 == 0 ? 1 : 0;
}

static void steps_and_choices(void)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, model_dir("f32"), DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2), *r = kb_create("cpu", 2);
    cpu_embed_op = r->embed;
    r->embed = counting_embed;
    r->step_begin = step_begin;
    r->step_end = step_end_fails_first;
    kv_opts ko;
    kv_opts_default(&ko, &m.cfg);
    kv_pool *pb = kv_pool_create(b, &m.cfg, &ko, NULL), *pr = kv_pool_create(r, &m.cfg, &ko, NULL);
    kv_seq *sb = kv_seq_new(pb, 0), *sr = kv_seq_new(pr, 0);
    int V = m.cfg.vocab_size, ids[40];
    float *lb = malloc(sizeof(float) * V), *lr = malloc(sizeof(float) * V);
    for (int i = 0; i < 6; i++)
        ids[i] = (i * 7919 + 13) % V;
    kb_sample pick = {.temp = 1.0f, .top_p = 0.9f, .repeat_penalty = 1.2f, .top_k = 50, .u = 0.37};
    int n = 6, same = 1, steps = 0;
    while (n < 30) {
        int first = n == 6 ? 0 : n - 1, nb = -1, nr = -1, want = -1;
        pick.history = ids;
        pick.n_history = n;
        pick.u = fmod(pick.u + 0.618, 1.0);
        if (gpt2_step(&m, b, sb, ids + first, n - first, &pick, &nb, lb) ||
            gpt2_step(&m, r, sr, ids + first, n - first, &pick, &nr, lr)) {
            CHECK(0, "step at %d: %s", n, err_msg());
            break;
        }
        /* the choice made beside the logits is the rule applied to them */
        b->sample(b, &want, lb, V, &pick);
        same &= nb == want && nr == nb && rel_err(lr, lb, V) == 0;
        steps++;
        ids[n++] = nb;
    }
    CHECK(same,
          "a step chose other than the sampling rule on its logits, or a reissued step differed");
    CHECK(issued == 2 * steps && ends == 2 * steps,
          "%d steps issued %d times (%d ends), not twice each", steps, issued, ends);
    CHECK(kv_len(sr) == n - 1 && kv_len(sb) == n - 1,
          "cache lengths %d and %d after feeding %d tokens", kv_len(sr), kv_len(sb), n - 1);
    free(lb);
    free(lr);
    kv_pool_free(pb);
    kv_pool_free(pr);
    gpt2_free(&m);
    b->destroy(b);
    r->destroy(r);
}

/* A recorded step is keyed by everything it reads besides its scalars: with the same cache,
 * workspace and ids, weights held elsewhere must give another key (a replay would read the old
 * weights). */
static unsigned char keys[2][256];
static size_t key_len[2];
static int n_keys;

static int capture_key(kb_backend *b, const kb_step *s, int *replayed)
{
    (void)b;
    *replayed = 0;
    if (s->n == 1 && n_keys < 2 && s->key_bytes <= sizeof keys[0]) {
        memcpy(keys[n_keys], s->key, s->key_bytes);
        key_len[n_keys++] = s->key_bytes;
    }
    return 0;
}

static void step_key_holds_weights(void)
{
    gpt2_model m, other;
    CHECK(gpt2_load(&m, model_dir("f32"), DT_F32, NULL) == 0 &&
              gpt2_load(&other, model_dir("f32"), DT_F32, NULL) == 0,
          "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2);
    b->step_begin = capture_key;
    kv_opts ko;
    kv_opts_default(&ko, &m.cfg);
    kv_pool *p = kv_pool_create(b, &m.cfg, &ko, NULL);
    kv_seq *seq = kv_seq_new(p, 0);
    int ids[3] = {11, 12, 13};
    n_keys = 0;
    CHECK(gpt2_forward(&m, b, seq, ids, 2, NULL) == 0, "prefill: %s", err_msg());
    CHECK(gpt2_forward(&m, b, seq, ids + 2, 1, NULL) == 0 && kv_truncate(seq, 2) == 0, "decode: %s",
          err_msg());
    /* the same model struct (same workspace and cache) reading another copy of the weights */
    gpt2_layer *layers = m.layers;
    kb_mat wte = m.wte, wpe = m.wpe;
    m.layers = other.layers;
    m.wte = other.wte;
    m.wpe = other.wpe;
    CHECK(gpt2_forward(&m, b, seq, ids + 2, 1, NULL) == 0, "decode on other weights: %s",
          err_msg());
    m.layers = layers;
    m.wte = wte;
    m.wpe = wpe;
    CHECK(n_keys == 2 && key_len[0] == key_len[1] && key_len[0] > 0, "%d decode keys captured",
          n_keys);
    CHECK(n_keys == 2 && memcmp(keys[0], keys[1], key_len[0]),
          "moving the weights left the step's key unchanged");
    kv_seq_free(seq);
    kv_pool_free(p);
    gpt2_free(&other);
    gpt2_free(&m);
    b->destroy(b);
}

/* The fused one-token products against a plain double-precision computation of their contract:
 * layernorm in, bias, GELU or the residual add out, and the LM head's transposed product. */
static void fused_products(void)
{
    enum { K = 40, N = 24 };
    float x[K], w[K * N], bias[N], g[K], be[K], y[N], y0[N];
    uint64_t s = 3;
    for (int i = 0; i < K * N; i++)
        w[i] =
            (float)((s = s * 6364136223846793005ull + 1442695040888963407ull) >> 40) / (1 << 24) -
            0.5f;
    for (int i = 0; i < K; i++) {
        x[i] = 2 * w[i * 7 % (K * N)] + 0.3f;
        g[i] = 1 + w[i + 100];
        be[i] = w[i + 200];
    }
    for (int j = 0; j < N; j++)
        bias[j] = w[j + 300], y0[j] = w[j + 400];
    kb_backend *b = kb_create("cpu", 2);
    kb_mat m = {w, DT_F32, K, N, NULL, 0};
    kb_norm ln = {g, be, 1e-5f};
    double mean = 0, var = 0, xn[K];
    for (int k = 0; k < K; k++)
        mean += x[k] / K;
    for (int k = 0; k < K; k++)
        var += (x[k] - mean) * (x[k] - mean) / K;
    for (int k = 0; k < K; k++)
        xn[k] = (x[k] - mean) / sqrt(var + 1e-5) * g[k] + be[k];
    for (int v = 0; v < 3; v++) { /* norm + GELU; plain with bias added to y; the LM head */
        float ref[K];
        if (v < 2) {
            memcpy(y, y0, sizeof y);
            CHECK(cpu_linear(b, y, x, 1, &m, bias, v == 0 ? &ln : NULL,
                             v == 0 ? KB_GELU : KB_LINEAR, v == 1) == 0,
                  "%s", err_msg());
            for (int j = 0; j < N; j++) {
                double a = bias[j];
                for (int k = 0; k < K; k++)
                    a += (v == 0 ? xn[k] : x[k]) * w[k * N + j];
                ref[j] =
                    (float)(v == 0 ? 0.5 * a *
                                         (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))
                                   : y0[j] + a);
            }
            CHECK(rel_err(y, ref, N) < 1e-6, "linear %s: rel err %.3g",
                  v == 0 ? "norm+gelu" : "residual", rel_err(y, ref, N));
        } else {
            kb_mat t = {w, DT_F32, N, K, NULL, 0}; /* [N, K]: y[N] = norm(x)[K] . rows */
            float yt[N];
            CHECK(cpu_linear_t(b, yt, x, 1, &t, &ln) == 0, "%s", err_msg());
            for (int j = 0; j < N; j++) {
                double a = 0;
                for (int k = 0; k < K; k++)
                    a += xn[k] * w[j * K + k];
                ref[j] = (float)a;
            }
            CHECK(rel_err(yt, ref, N) < 1e-6, "linear_t: rel err %.3g", rel_err(yt, ref, N));
        }
    }
    b->destroy(b);
}

/* The forward pass's fused decode route (five products a layer, norms and residual adds folded in)
 * run on the CPU through the reference twins must give the unfused route's logits bit for bit: the
 * same arithmetic in another arrangement. */
static void fused_route_matches(void)
{
    const char *types[2] = {"f32", "bf16"};
    for (int t = 0; t < 2; t++) {
        gpt2_model m;
        dtype dt;
        dt_parse(types[t], &dt);
        CHECK(gpt2_load(&m, model_dir(types[t]), dt, NULL) == 0, "load: %s", err_msg());
        kb_backend *plain = kb_create("cpu", 2), *fused = kb_create("cpu", 2);
        fused->linear = cpu_linear;
        fused->linear_t = cpu_linear_t;
        int V = m.cfg.vocab_size, ids[24], differ = 0;
        for (int i = 0; i < 24; i++)
            ids[i] = (i * 104729 + 7) % V;
        kv_opts ko;
        kv_opts_default(&ko, &m.cfg);
        kv_pool *pp = kv_pool_create(plain, &m.cfg, &ko, NULL),
                *pf = kv_pool_create(fused, &m.cfg, &ko, NULL);
        kv_seq *sp = kv_seq_new(pp, 0), *sf = kv_seq_new(pf, 0);
        float *a = malloc(sizeof(float) * V), *r = malloc(sizeof(float) * V);
        CHECK(gpt2_forward(&m, plain, sp, ids, 6, r) == 0 &&
                  gpt2_forward(&m, fused, sf, ids, 6, a) == 0,
              "%s", err_msg());
        for (int i = 6; i < 24; i++) {
            CHECK(gpt2_forward(&m, plain, sp, ids + i, 1, r) == 0 &&
                      gpt2_forward(&m, fused, sf, ids + i, 1, a) == 0,
                  "%s", err_msg());
            differ += memcmp(a, r, sizeof(float) * V) != 0;
        }
        CHECK(!differ,
              "%s: %d of 18 decode steps differ from the unfused route (rel err of the last %.3g)",
              types[t], differ, rel_err(a, r, V));
        free(a);
        free(r);
        kv_seq_free(sp);
        kv_seq_free(sf);
        kv_pool_free(pp);
        kv_pool_free(pf);
        gpt2_free(&m); /* its activations live on the backend that ran it last */
        plain->destroy(plain);
        fused->destroy(fused);
    }
}

/* The same steps run with 1, 2 and 3 of a 3-thread backend's threads give the same logits bit for
 * bit (the CPU backend changes the threads of its steps when another process takes a core), in
 * every weight dtype, through the GEMMs of a prefill and the streamed products of decode. */
static void threads_change_nothing(void)
{
    const char *types[4] = {"f32", "bf16", "f16", "q8"};
    for (int t = 0; t < 4; t++) {
        gpt2_model m;
        dtype dt;
        dt_parse(types[t], &dt);
        CHECK(gpt2_load(&m, fixture_model("f32", 64), dt, NULL) == 0, "load: %s", err_msg());
        int V = m.cfg.vocab_size, ids[40], differ = 0;
        for (int i = 0; i < 40; i++)
            ids[i] = (i * 104729 + 7) % V;
        float *ref = malloc(sizeof(float) * V * 12), *got = malloc(sizeof(float) * V);
        for (int th = 1; th <= 3; th++) {
            kb_backend *b = kb_create("cpu", 3);
            b->step_begin = NULL; /* the count stays th: no adapting */
            b->step_end = NULL;
            b->threads = th;
            kv_opts ko;
            kv_opts_default(&ko, &m.cfg);
            kv_pool *p = kv_pool_create(b, &m.cfg, &ko, NULL);
            kv_seq *s = kv_seq_new(p, 0);
            for (int i = 0; i < 12; i++) { /* a prefill of 20 (GEMMs), then decode steps */
                float *out = th == 1 ? ref + (size_t)V * i : got;
                if (i == 0 ? gpt2_forward(&m, b, s, ids, 20, out)
                           : gpt2_forward(&m, b, s, ids + 19 + i, 1, out)) {
                    CHECK(0, "%s", err_msg());
                    break;
                }
                differ += th > 1 && memcmp(got, ref + (size_t)V * i, sizeof(float) * V) != 0;
            }
            kv_pool_free(p);
            gpt2_free(&m); /* its activations live on this backend */
            b->destroy(b);
            CHECK(gpt2_load(&m, fixture_model("f32", 64), dt, NULL) == 0, "load: %s", err_msg());
        }
        CHECK(!differ, "%s weights: %d steps differ between the threads they ran with", types[t],
              differ);
        free(ref);
        free(got);
        gpt2_free(&m);
    }
}

/* A background pass told to give way stops before its next layer, returns 1 and leaves the cache as
 * it was; not told, it is gpt2_forward (the same cache, bit for bit). */
static void yielding_pass(void)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, model_dir("f32"), DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2);
    kv_opts ko;
    kv_opts_default(&ko, &m.cfg);
    kv_pool *pool = kv_pool_create(b, &m.cfg, &ko, NULL);
    kv_seq *y = kv_seq_new(pool, 0), *f = kv_seq_new(pool, 1);
    int ids[12];
    for (int i = 0; i < 12; i++)
        ids[i] = 100 + 31 * i;
    atomic_int stop = 1;
    CHECK(gpt2_forward_yielding(&m, b, y, ids, 12, &stop) == 1 && kv_len(y) == 0,
          "told to give way: rc or length %d", kv_len(y));
    atomic_store(&stop, 0);
    CHECK(gpt2_forward_yielding(&m, b, y, ids, 12, &stop) == 0 &&
              gpt2_forward(&m, b, f, ids, 12, NULL) == 0,
          "a pass not told to give way failed: %s", err_msg());
    size_t n = kv_export_bytes(y);
    char *a = malloc(n), *c = malloc(n);
    CHECK(a && c && kv_export(y, a) == 0 && kv_export(f, c) == 0 && !memcmp(a, c, n),
          "a yielding pass's cache differs from gpt2_forward's");
    CHECK(m.yield == NULL, "the flag outlived its pass");
    free(a);
    free(c);
    kv_pool_free(pool);
    gpt2_free(&m);
    b->destroy(b);
}

TEST_TABLE(forward_tests, {"forward/yielding_pass", yielding_pass},
           {"forward/threads_change_nothing", threads_change_nothing},
           {"forward/fused_products_match_reference", fused_products},
           {"forward/fused_route_matches", fused_route_matches},
           {"forward/step_key_holds_weights", step_key_holds_weights},
           {"forward/cache_equals_recompute", cache_equals_recompute},
           {"forward/load_errors", load_errors}, {"forward/steps_and_choices", steps_and_choices});
