/* The GPU self-test's logic, with a stand-in GPU: the CPU backend describing itself as a device
 * with two kernel sets, whose matrix products can be made wrong by 1% (in both sets, or in the fast
 * one only). A correct one passes with no error at all; a wrong fast set falls back to the basic
 * one; when both are wrong the test fails by far more than the limit, `auto` then runs on the CPU
 * and `cuda` refuses; verdicts are cached by key and a damaged cache only means testing again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/selftest.h"
#include "../../kernels/err.h"
#include "check.h"
#include "model_fixture.h"

static int broken; /* 1: every kernel set is wrong; 2: the fast one only */
static kb_kernels mock_set;
static int (*cpu_matmul)(kb_backend *, float *, const float *, int, const kb_mat *, const float *,
                         kb_act);

static int mock_describe(kb_backend *b, char *buf, size_t n)
{
    (void)b;
    snprintf(buf, n, "Mock GPU, driver 99.0, compute 8.0");
    return 0;
}

static int mock_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                       const float *bias, kb_act act)
{
    int rc = cpu_matmul(b, y, x, n, w, bias, act),
        wrong = broken == 1 || (broken == 2 && mock_set == KB_KERNELS_FAST);
    for (int i = 0; wrong && !rc && i < n * w->cols; i++)
        y[i] *= 1.01f;
    return rc;
}

static int mock_use_kernels(kb_backend *b, kb_kernels k)
{
    (void)b;
    mock_set = k;
    return 0;
}

/* the fixture model, loaded as if on the stand-in GPU */
static int load_on_mock(loaded_model *lm, model_opts *o, const char *device)
{
    model_opts_init(o);
    o->model_dir = fixture_model("f32", 64);
    o->device = "cpu";
    o->wtype = DT_F32;
    o->wtype_set = 1;
    o->threads = 2;
    o->skip_selftest = 1;
    if (load_model(lm, o))
        return -1;
    cpu_matmul = lm->backend->matmul;
    lm->backend->matmul = mock_matmul;
    lm->backend->describe = mock_describe;
    lm->backend->use_kernels = mock_use_kernels;
    o->device = device;
    o->skip_selftest = 0;
    return 0;
}

static void selftest_logic(void)
{
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/cache", temp_dir());
    snprintf(path, sizeof path, "%s/kvchat/selftest.json", dir);
    setenv("XDG_CACHE_HOME", dir, 1);
    unsetenv("KVCHAT_SELFTEST");
    loaded_model lm;
    model_opts o;
    selftest_result r;
    if (load_on_mock(&lm, &o, "cuda")) {
        CHECK(0, "load: %s", err_msg());
        return;
    }
    broken = 0;
    CHECK(selftest_run(&lm, &r) == 0 && r.passed && r.worst == 0 && r.steps > 1,
          "a correct device: passed %d, worst %.3g over %d steps (%s)", r.passed, r.worst, r.steps,
          err_msg());
    CHECK(selftest_limit(DT_F32, DT_F32) < selftest_limit(DT_F16, DT_F32) &&
              selftest_limit(DT_F16, DT_F32) < selftest_limit(DT_BF16, DT_F32) &&
              selftest_limit(DT_F32, DT_F32) < selftest_limit(DT_F32, DT_BF16),
          "limits out of order");
    /* wrong fast kernels: the basic ones pass and stay in use, on the device (verdicts kept apart)
     */
    char dir2[4200];
    snprintf(dir2, sizeof dir2, "%s-fast", dir);
    setenv("XDG_CACHE_HOME", dir2, 1);
    broken = 2;
    CHECK(selftest_gate(&lm, &o) == 0 && lm.backend->describe && lm.kernels == KB_KERNELS_BASIC &&
              mock_set == KB_KERNELS_BASIC,
          "a device whose fast kernels fail: gate %s, kernels %s", err_msg(),
          kernels_name(lm.kernels));
    /* asked for the fast set alone, it is refused */
    o.kernels_set = 1;
    o.kernels = KB_KERNELS_FAST;
    CHECK(selftest_gate(&lm, &o) == -1 && strstr(err_msg(), "fast kernels"),
          "--gpu-kernels fast on failing fast kernels: %s", err_msg());
    o.kernels_set = 0;
    setenv("XDG_CACHE_HOME", dir, 1);
    broken = 1;
    CHECK(selftest_run(&lm, &r) == 0 && !r.passed && r.worst > 10 * r.limit,
          "a device 1%% off: passed %d, worst %.3g (limit %.3g)", r.passed, r.worst, r.limit);
    /* --device cuda on the wrong device: refused, naming the gap; the verdict is cached */
    CHECK(selftest_gate(&lm, &o) == -1 && strstr(err_msg(), "Mock GPU") &&
              strstr(err_msg(), "self-test"),
          "--device cuda used a device that fails: %s", err_msg());
    FILE *f = fopen(path, "r");
    CHECK(f, "no verdict cached at %s", path);
    if (f)
        fclose(f);
    /* the cached verdict holds even though the device is fine now (selftest tests again) */
    broken = 0;
    CHECK(selftest_gate(&lm, &o) == -1 && strstr(err_msg(), "cached verdict"),
          "the cached verdict was not used: %s", err_msg());
    unload_model(&lm);
    /* a damaged cache reads as empty: the test runs again, and --device auto falls back to the CPU
     */
    f = fopen(path, "w");
    if (f) {
        fputs("{ not json", f);
        fclose(f);
    }
    if (load_on_mock(&lm, &o, "auto")) {
        CHECK(0, "load: %s", err_msg());
        return;
    }
    broken = 1;
    CHECK(selftest_gate(&lm, &o) == 0 && !lm.backend->describe && !strcmp(lm.backend->name, "cpu"),
          "--device auto kept a device that fails: %s", err_msg());
    unload_model(&lm);
    /* KVCHAT_SELFTEST=0 skips the check (for diagnosing a GPU) */
    if (load_on_mock(&lm, &o, "cuda") == 0) {
        setenv("KVCHAT_SELFTEST", "0", 1);
        CHECK(selftest_gate(&lm, &o) == 0 && lm.backend->describe,
              "KVCHAT_SELFTEST=0 did not skip the test");
        unsetenv("KVCHAT_SELFTEST");
        unload_model(&lm);
    }
    broken = 0;
}

TEST_TABLE(selftest_tests, {"selftest/verdicts_cache_and_fallback", selftest_logic});
