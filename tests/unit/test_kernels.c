/* Each CPU kernel against a plain double-precision loop written from the definition. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/backend.h"
#include "../../kernels/cpu/cpu.h"
#include "check.h"

static kb_backend *be(void)
{
    static kb_backend *b;
    if (!b)
        b = kb_create("cpu", 2);
    return b;
}

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) * 0x1.0p-53 * 2 - 1);
}

static double rel_l2(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* weights stored in `t`; the reference reads back the stored values, so only arithmetic is compared */
static void matmul_case(dtype t, int n, int K, int N, int with_bias)
{
    uint64_t s = (uint64_t)(n * 131 + K * 7 + N + t);
    float *x = malloc(sizeof(float) * n * K), *wf = malloc(sizeof(float) * K * N), *bias = malloc(sizeof(float) * N);
    float *y = malloc(sizeof(float) * n * N), *yt = malloc(sizeof(float) * n * K);
    void *w = malloc(dt_size(t) * K * N);
    double *ref = malloc(sizeof(double) * n * N), *reft = malloc(sizeof(double) * n * K);
    for (int i = 0; i < n * K; i++)
        x[i] = rnd(&s);
    for (int i = 0; i < K * N; i++)
        wf[i] = rnd(&s);
    for (int i = 0; i < N; i++)
        bias[i] = rnd(&s);
    dt_from_f32(w, wf, t, (size_t)K * N);
    dt_to_f32(wf, w, t, (size_t)K * N);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < N; j++) {
            double acc = with_bias ? bias[j] : 0;
            for (int k = 0; k < K; k++)
                acc += (double)x[r * K + k] * wf[k * N + j];
            ref[r * N + j] = acc;
        }
    kb_mat m = {.data = w, .type = t, .rows = K, .cols = N};
    CHECK(be()->matmul(be(), y, x, n, &m, with_bias ? bias : NULL) == 0, "matmul failed");
    double e = rel_l2(y, ref, (size_t)n * N);
    CHECK(e < 1e-6, "matmul %s n=%d K=%d N=%d: rel err %.3g", dt_name(t), n, K, N, e);
    /* transposed product: x[n, N] against the same matrix read as [K, N]^T gives [n, K] */
    for (int r = 0; r < n; r++)
        for (int k = 0; k < K; k++) {
            double acc = 0;
            for (int j = 0; j < N; j++)
                acc += (double)x[(r * K + j) % (n * K)] * wf[k * N + j];
            reft[r * K + k] = acc;
        }
    float *xt = malloc(sizeof(float) * n * N);
    for (int r = 0; r < n; r++)
        for (int j = 0; j < N; j++)
            xt[r * N + j] = x[(r * K + j) % (n * K)];
    m = (kb_mat){.data = w, .type = t, .rows = K, .cols = N};
    CHECK(be()->matmul_t(be(), yt, xt, n, &m) == 0, "matmul_t failed");
    e = rel_l2(yt, reft, (size_t)n * K);
    CHECK(e < 1e-6, "matmul_t %s n=%d: rel err %.3g", dt_name(t), n, e);
    free(xt);
    free(x);
    free(wf);
    free(bias);
    free(y);
    free(yt);
    free(w);
    free(ref);
    free(reft);
}

static void matmul_all(void)
{
    dtype types[3] = {DT_F32, DT_F16, DT_BF16};
    for (int i = 0; i < 3; i++) {
        matmul_case(types[i], 1, 64, 192, 1);   /* decode: streamed */
        matmul_case(types[i], 3, 67, 45, 1);    /* odd sizes, streamed, scalar tails */
        matmul_case(types[i], 20, 96, 130, 1);  /* prefill: GEMM */
        matmul_case(types[i], 9, 33, 17, 0);    /* no bias */
    }
}

static void layernorm_gelu_add(void)
{
    enum { N = 5, C = 77 };
    uint64_t s = 9;
    float x[N * C], y[N * C], g[C], b[C];
    double ref[N * C];
    for (int i = 0; i < N * C; i++)
        x[i] = rnd(&s) * 3 + 1;
    for (int i = 0; i < C; i++) {
        g[i] = 1 + rnd(&s) * 0.5f;
        b[i] = rnd(&s);
    }
    for (int r = 0; r < N; r++) {
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++)
            mu += x[r * C + c];
        mu /= C;
        for (int c = 0; c < C; c++)
            var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
        var /= C;
        for (int c = 0; c < C; c++)
            ref[r * C + c] = (x[r * C + c] - mu) / sqrt(var + 1e-5) * g[c] + b[c];
    }
    be()->layernorm(be(), y, x, g, b, N, C, 1e-5f);
    CHECK(rel_l2(y, ref, N * C) < 1e-6, "layernorm rel err %.3g", rel_l2(y, ref, N * C));
    for (int i = 0; i < N * C; i++) {
        double v = x[i] * 2 - 1;
        y[i] = (float)v;
        ref[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    y[0] = -30;
    ref[0] = 0;
    y[1] = 30;
    ref[1] = 30;
    be()->gelu(be(), y, N * C);
    double worst = 0;
    for (int i = 0; i < N * C; i++)
        worst = fmax(worst, fabs(y[i] - ref[i]));
    CHECK(worst < 2e-6, "gelu max abs err %.3g", worst);
    float a[3] = {1, 2, 3}, d[3] = {0.5f, -2, 4};
    be()->add(be(), a, d, 3);
    CHECK(a[0] == 1.5f && a[1] == 0 && a[2] == 7, "add");
}

static void attention_case(int past, int n, int H, int C)
{
    uint64_t s = (uint64_t)(past * 17 + n);
    int T = past + n, hd = C / H;
    float *qkv = malloc(sizeof(float) * n * 3 * C), *kc = calloc((size_t)T * C, 4), *vc = calloc((size_t)T * C, 4);
    float *y = malloc(sizeof(float) * n * C);
    double *ref = malloc(sizeof(double) * n * C);
    for (int i = 0; i < past * C; i++) {
        kc[i] = rnd(&s) * 2;
        vc[i] = rnd(&s);
    }
    for (int i = 0; i < n * 3 * C; i++)
        qkv[i] = rnd(&s) * 2;
    /* reference: keys/values are the cached rows, then the new tokens' own */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            int len = past + t + 1;
            double *sc = malloc(sizeof(double) * len), mx = -1e300, sum = 0;
            for (int j = 0; j < len; j++) {
                /* cached rows are head-major: [H, T, hd] */
                const float *k = j < past ? kc + ((size_t)h * T + j) * hd : qkv + (j - past) * 3 * C + C + h * hd;
                double d = 0;
                for (int c = 0; c < hd; c++)
                    d += (double)qkv[t * 3 * C + h * hd + c] * k[c];
                sc[j] = d / sqrt(hd);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < len; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int c = 0; c < hd; c++) {
                double o = 0;
                for (int j = 0; j < len; j++) {
                    const float *v = j < past ? vc + ((size_t)h * T + j) * hd : qkv + (j - past) * 3 * C + 2 * C + h * hd;
                    o += sc[j] / sum * v[c];
                }
                ref[t * C + h * hd + c] = o;
            }
            free(sc);
        }
    CHECK(be()->attention(be(), y, qkv, kc, vc, T, past, n, H, C) == 0, "attention failed");
    double e = rel_l2(y, ref, (size_t)n * C);
    CHECK(e < 1e-6, "attention past=%d n=%d: rel err %.3g", past, n, e);
    int h = H - 1;
    CHECK(!memcmp(kc + ((size_t)h * T + past) * hd, qkv + C + h * hd, sizeof(float) * hd),
          "new key not stored head-major in the cache");
    CHECK(!memcmp(vc + ((size_t)h * T + T - 1) * hd, qkv + (size_t)(n - 1) * 3 * C + 2 * C + h * hd, sizeof(float) * hd),
          "new value not stored head-major in the cache");
    free(qkv);
    free(kc);
    free(vc);
    free(y);
    free(ref);
}

static void attention_all(void)
{
    attention_case(0, 1, 2, 16);
    attention_case(0, 7, 4, 32);
    attention_case(13, 1, 3, 24);
    attention_case(9, 5, 2, 16);
    attention_case(0, 70, 2, 32);  /* GEMM path, two row blocks */
    attention_case(11, 20, 4, 32); /* GEMM path after a cached prefix */
}

static void embed(void)
{
    enum { V = 10, P = 6, C = 5 };
    float wte[V * C], wpe[P * C], x[2 * C];
    uint16_t h[V * C];
    for (int i = 0; i < V * C; i++)
        wte[i] = (float)i * 0.25f;
    for (int i = 0; i < P * C; i++)
        wpe[i] = (float)i;
    dt_from_f32(h, wte, DT_BF16, V * C);
    kb_mat te = {.data = h, .type = DT_BF16, .rows = V, .cols = C}, pe = {.data = wpe, .type = DT_F32, .rows = P, .cols = C};
    be()->embed(be(), x, (int[]){7, 2}, 2, 3, &te, &pe);
    int ok = 1;
    for (int c = 0; c < C; c++)
        ok &= x[c] == (7 * C + c) * 0.25f + (3 * C + c) && x[C + c] == (2 * C + c) * 0.25f + (4 * C + c);
    CHECK(ok, "embedding rows wrong");
}

TEST_TABLE(kernel_tests, {"kernels/matmul_vs_definition", matmul_all}, {"kernels/layernorm_gelu_add", layernorm_gelu_add},
           {"kernels/attention_vs_definition", attention_all}, {"kernels/embed", embed});
