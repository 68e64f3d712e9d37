/* Every CUDA kernel against its CPU twin (the reference), on the same inputs: skipped where the
 * build has no CUDA backend or the machine no GPU. tests/gpu/check.sh runs the whole model. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/backend.h"
#include "../../kernels/cpu/cpu.h"
#include "../../kernels/err.h"
#include "check.h"
#ifdef KVCHAT_CUDA
#include "../../kernels/cuda/cuda.h"
#endif

#ifdef KVCHAT_CUDA
static kb_backend *gpu(void)
{
    static kb_backend *g;
    static int tried;
    if (!tried) {
        tried = 1;
        g = cuda_backend_create();
    }
    return g;
}

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) * 0x1.0p-53 * 2 - 1);
}

static void *up(kb_backend *g, const void *host, size_t bytes)
{
    void *d = g->alloc(g, bytes, "test");
    g->copy(g, d, host, bytes);
    return d;
}

static void twins(void)
{
    kb_backend *g = gpu(), *c = kb_create("cpu", 2);
    if (!g) {
        SKIP("no GPU (%s)", err_msg());
        c->destroy(c);
        return;
    }
    enum { n = 19, K = 96, N = 160 };
    uint64_t s = 5;
    float x[n * K], y1[n * N], y2[n * N], bias[N], wf[K * N];
    for (int i = 0; i < n * K; i++)
        x[i] = rnd(&s);
    for (int i = 0; i < K * N; i++)
        wf[i] = rnd(&s) * 0.2f;
    for (int i = 0; i < N; i++)
        bias[i] = rnd(&s);
    dtype types[3] = {DT_F32, DT_F16, DT_BF16};
    for (int t = 0; t < 3; t++) {
        uint16_t w16[K * N];
        void *w = types[t] == DT_F32 ? (void *)wf : (void *)w16;
        if (types[t] != DT_F32)
            dt_from_f32(w16, wf, types[t], K * N);
        for (int rows = 1; rows <= n; rows += n - 1) {
            kb_mat hw = {w, types[t], K, N}, dw = {up(g, w, dt_size(types[t]) * K * N), types[t], K, N};
            float *dx = up(g, x, sizeof x), *db = up(g, bias, sizeof bias), *dy = g->alloc(g, sizeof y2, "y");
            c->matmul(c, y1, x, rows, &hw, bias);
            g->matmul(g, dy, dx, rows, &dw, db);
            g->copy(g, y2, dy, sizeof(float) * rows * N);
            double e = rel_err(y2, y1, rows * N);
            CHECK(e < (types[t] == DT_F32 ? 1e-5 : 1e-2), "matmul %s n=%d: rel err %.3g", dt_name(types[t]), rows, e);
            g->release(g, (void *)dw.data);
            g->release(g, dx);
            g->release(g, db);
            g->release(g, dy);
        }
    }
    /* layernorm, gelu, add */
    float g1[K], b1[K], out1[n * K], out2[n * K];
    for (int i = 0; i < K; i++)
        g1[i] = 1 + rnd(&s) * 0.3f, b1[i] = rnd(&s);
    float *dx = up(g, x, sizeof x), *dg = up(g, g1, sizeof g1), *dbb = up(g, b1, sizeof b1), *dy = g->alloc(g, sizeof x, "y");
    c->layernorm(c, out1, x, g1, b1, n, K, 1e-5f);
    g->layernorm(g, dy, dx, dg, dbb, n, K, 1e-5f);
    g->copy(g, out2, dy, sizeof out2);
    CHECK(rel_err(out2, out1, n * K) < 1e-5, "layernorm");
    memcpy(out1, x, sizeof x);
    c->gelu(c, out1, n * K);
    g->gelu(g, dx, n * K);
    g->copy(g, out2, dx, sizeof out2);
    CHECK(rel_err(out2, out1, n * K) < 1e-5, "gelu");
    g->release(g, dx);
    g->release(g, dg);
    g->release(g, dbb);
    g->release(g, dy);
    c->destroy(c);
}

static void attention_twins(void)
{
    kb_backend *g = gpu(), *c = kb_create("cpu", 2);
    if (!g) {
        SKIP("no GPU");
        c->destroy(c);
        return;
    }
    enum { H = 4, hd = 16, C = H * hd, past = 21, n = 5, T = past + n, bt = 4 };
    dtype types[4] = {DT_F32, DT_F16, DT_BF16, DT_I8};
    uint64_t s = 9;
    float qkv_pre[past * 3 * C], qkv[n * 3 * C], y1[n * C], y2[n * C], yp[past * C];
    for (int i = 0; i < past * 3 * C; i++)
        qkv_pre[i] = rnd(&s) * 2;
    for (int i = 0; i < n * 3 * C; i++)
        qkv[i] = rnd(&s) * 2;
    for (int t = 0; t < 4; t++) {
        int nb = (T + bt - 1) / bt, table[16];
        for (int i = 0; i < nb; i++)
            table[i] = nb - 1 - i;
        kb_kv kv = {.type = types[t], .n_layer = 2, .n_head = H, .head_dim = hd, .block_tokens = bt, .table = table};
        kv.block_bytes = kvl_block_bytes(types[t], 2, H, hd, bt);
        kv.base = calloc((size_t)nb, kv.block_bytes);
        kb_kv dkv = kv;
        dkv.base = g->alloc(g, nb * kv.block_bytes, "cache");
        float *dpre = up(g, qkv_pre, sizeof qkv_pre), *dq = up(g, qkv, sizeof qkv), *dy = g->alloc(g, sizeof yp, "y");
        c->attention(c, yp, qkv_pre, &kv, 1, 0, past);
        c->attention(c, y1, qkv, &kv, 1, past, n);
        g->attention(g, dy, dpre, &dkv, 1, 0, past);
        g->attention(g, dy, dq, &dkv, 1, past, n);
        g->copy(g, y2, dy, sizeof y2);
        double e = rel_err(y2, y1, n * C);
        CHECK(e < (types[t] == DT_F32 ? 1e-5 : 1e-2), "attention %s: rel err %.3g", dt_name(types[t]), e);
        free(kv.base);
        g->release(g, dkv.base);
        g->release(g, dpre);
        g->release(g, dq);
        g->release(g, dy);
    }
    c->destroy(c);
}

TEST_TABLE(cuda_tests, {"cuda/kernels_match_cpu_twins", twins}, {"cuda/attention_matches_cpu_twin", attention_twins});
#else
static void no_cuda(void)
{
    SKIP("this build has no CUDA backend (nvcc was not found)");
}
TEST_TABLE(cuda_tests, {"cuda/kernels_match_cpu_twins", no_cuda});
#endif
