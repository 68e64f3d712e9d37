/* The forward pass with the KV cache against the same model run without it: decoding token by token,
 * or in chunks, must give the logits of one pass over the whole sequence. (The NumPy reference test
 * in tests/test_reference.sh checks the whole pass against an independent implementation.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/commands.h"
#include "../../kernels/err.h"
#include "../../model/gpt2.h"
#include "check.h"
#include "model_fixture.h"

static const char *model_dir(const char *dtype_name)
{
    return fixture_model(dtype_name, 40);
}

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
        CHECK(gpt2_forward(&m, b, full, &bad, 1, a) == -1 && strstr(err_msg(), "outside the vocabulary"),
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
    CHECK(gpt2_load(&m, "/nonexistent-model", DT_F32, NULL) == -1 && strstr(err_msg(), "/nonexistent-model/config.json"),
          "missing dir: %s", err_msg());
    /* f16 file loaded as f32 and as bf16: conversions happen, shapes still check */
    CHECK(gpt2_load(&m, model_dir("f16"), DT_BF16, NULL) == 0, "f16 as bf16: %s", err_msg());
    CHECK(m.wtype == DT_BF16 && m.file_type == DT_F16, "types recorded");
    gpt2_free(&m);
}

TEST_TABLE(forward_tests, {"forward/cache_equals_recompute", cache_equals_recompute}, {"forward/load_errors", load_errors});
