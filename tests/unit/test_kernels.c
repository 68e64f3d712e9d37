/* Each CPU kernel against a plain double-precision loop written from the definition. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/backend.h"
#include "../../kernels/cpu/cpu.h"
#include "../../kernels/cpu/vecmath.h"
#include "../../kernels/cpu/simd.h"
#include "../../kernels/err.h"
#include "../../kernels/kvlayout.h"
#include "check.h"

static kb_backend *be(void)
{
    static kb_backend *b;
    if (!b)
        b = kb_create("cpu", 2);
    return b;
}

/* one thread: what be() computes must not depend on its thread count */
static kb_backend *be1(void)
{
    static kb_backend *b;
    if (!b)
        b = kb_create("cpu", 1);
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

/* what a product against weights of type t multiplies: bf16 weights take their inputs rounded to
 * bf16 */
static double input(float v, dtype t)
{
    return t == DT_BF16 ? dt_bf16_to_f32(dt_f32_to_bf16(v)) : v;
}

/* The weights packed in the backend's own layout (column blocks, where the columns fill whole
 * blocks; anything else stays as it is): the product is the row-major one's bit for bit, with
 * either activation, with one thread and with two. */
static void packed_case(const kb_mat *m, const float *x, int n, const float *bias)
{
    kb_mat pk;
    if (m->type == DT_Q6)
        return; /* packed as the LM head's rows: q6_packed_case */
#if defined(VW) && defined(CPU_Q8_TOKENS)
    int q4 = 1; /* 4-bit W in groups of 16 columns, where AVX-512 VNNI reads them so */
#else
    int q4 = 0;
#endif
#ifdef VW
    int want = m->type == DT_Q4                       ? q4 && m->cols % CPU_Q4_GROUP == 0
               : m->type == DT_Q8 || m->type == DT_Q6 ? 0
                                                      : m->cols % KB_COLUMN_BLOCK == 0;
#else
    int want = 0; /* a build without vectors keeps every W as it is */
#endif
    CHECK(be()->pack(be(), &pk, m) == 0, "pack failed");
    CHECK(!pk.data == !want, "%s [%d, %d] %s", dt_name(m->type), m->rows, m->cols,
          want ? "not packed" : "packed");
    if (!pk.data)
        return;
    size_t len = (size_t)n * m->cols;
    float *y = malloc(sizeof(float) * len), *yp = malloc(sizeof(float) * len);
    for (int act = 0; act < 2; act++)
        for (int b = 0; b < 2; b++) {
            kb_backend *k = b ? be1() : be();
            kb_act a = act ? KB_GELU : KB_LINEAR;
            CHECK(k->matmul(k, y, x, n, m, bias, a) == 0 &&
                      k->matmul(k, yp, x, n, &pk, bias, a) == 0,
                  "matmul failed");
            CHECK(!memcmp(y, yp, sizeof(float) * len),
                  "packed %s n=%d K=%d N=%d (%s, %d thread(s)) differs from row-major",
                  dt_name(m->type), n, m->rows, m->cols, act ? "gelu" : "linear", k->threads);
        }
    be()->release(be(), (void *)pk.data);
    free(y);
    free(yp);
}

/* weights stored in `t`; the reference reads back the stored values, so only arithmetic is compared
 */
static void matmul_case(dtype t, int n, int K, int N, int with_bias)
{
    uint64_t s = (uint64_t)(n * 131 + K * 7 + N + t);
    float *x = malloc(sizeof(float) * n * K), *wf = malloc(sizeof(float) * K * N),
          *bias = malloc(sizeof(float) * N);
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
                acc += input(x[r * K + k], t) * wf[k * N + j];
            ref[r * N + j] = acc;
        }
    kb_mat m = {.data = w, .type = t, .rows = K, .cols = N};
    CHECK(be()->matmul(be(), y, x, n, &m, with_bias ? bias : NULL, KB_LINEAR) == 0,
          "matmul failed");
    double e = rel_l2(y, ref, (size_t)n * N);
    CHECK(e < 1e-6, "matmul %s n=%d K=%d N=%d: rel err %.3g", dt_name(t), n, K, N, e);
    /* the GELU applied to the product's output (the MLP's first matrix) */
    CHECK(be()->matmul(be(), y, x, n, &m, with_bias ? bias : NULL, KB_GELU) == 0,
          "matmul+gelu failed");
    for (int i = 0; i < n * N; i++)
        ref[i] = 0.5 * ref[i] *
                 (1 + tanh(sqrt(2 / M_PI) * (ref[i] + 0.044715 * ref[i] * ref[i] * ref[i])));
    e = rel_l2(y, ref, (size_t)n * N);
    CHECK(e < 1e-6, "matmul+gelu %s n=%d K=%d N=%d: rel err %.3g", dt_name(t), n, K, N, e);
    packed_case(&m, x, n, with_bias ? bias : NULL);
    /* transposed product: x[n, N] against the same matrix read as [K, N]^T gives [n, K] */
    for (int r = 0; r < n; r++)
        for (int k = 0; k < K; k++) {
            double acc = 0;
            for (int j = 0; j < N; j++)
                acc += input(x[(r * K + j) % (n * K)], t) * wf[k * N + j];
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
        matmul_case(types[i], 1, 64, 192, 1);  /* decode: streamed */
        matmul_case(types[i], 3, 67, 45, 1);   /* odd sizes, streamed, scalar tails */
        matmul_case(types[i], 20, 96, 130, 1); /* prefill: GEMM */
        matmul_case(types[i], 43, 64, 300, 1); /* row tiles and panels with tails */
        matmul_case(types[i], 9, 33, 17, 0);   /* no bias */
        matmul_case(types[i], 5, 96, 128, 1);  /* packed in column blocks: decode, 5 tokens */
        matmul_case(types[i], 8, 70, 64, 0);   /* packed: bands with a short group, no bias */
        matmul_case(types[i], 21, 96, 320, 1); /* packed: prefill panels across blocks */
    }
}

/* Sums of many vectors at once (simd.h's vsum8x4, vsum16_x16 and vsums, which the decode
 * attention, the LM head and q8 decode use): each must be its one vector's sum bit for bit */
static void sums_at_once(void)
{
    uint64_t s = 5;
    float f[16 * 16], want[16], got[16];
    for (int i = 0; i < 16 * 16; i++) /* magnitudes far apart, so the order of additions shows */
        f[i] = rnd(&s) * (float)(1 << (i % 16 * 7 % 24));
#ifdef __AVX2__
    __m256 v8[8];
    for (int r = 0; r < 8; r++) {
        v8[r] = _mm256_loadu_ps(f + 8 * r);
        want[r] = vsum8(v8[r]);
    }
    _mm_storeu_ps(got, vsum8x4(v8));
    CHECK(!memcmp(got, want, 4 * sizeof *got), "4 sums of 8 at once differ from one at a time");
#if defined(VW) && VW == 8
    VSTOREF(got, vsums(v8));
    CHECK(!memcmp(got, want, 8 * sizeof *got), "vsums of 8 differs from one sum at a time");
#endif
#endif
#ifdef __AVX512F__
    __m512 v16[16];
    for (int r = 0; r < 16; r++) {
        v16[r] = _mm512_loadu_ps(f + 16 * r);
        want[r] = vsum16(v16[r]);
    }
    _mm512_storeu_ps(got, vsum16_x16(v16));
    CHECK(!memcmp(got, want, sizeof got), "16 sums at once differ from one at a time");
    _mm512_storeu_ps(got, vsums(v16));
    CHECK(!memcmp(got, want, sizeof got), "vsums of 16 differs from one sum at a time");
#endif
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
    cpu_gelu(be(), y, N * C);
    double worst = 0;
    for (int i = 0; i < N * C; i++)
        worst = fmax(worst, fabs(y[i] - ref[i]));
    CHECK(worst < 2e-6, "gelu max abs err %.3g", worst);
}

/* widened value of a cached row element, read through the layout contract */
static double cached(const kb_kv *kv, int layer, int which, int head, int pos, int c)
{
    const void *row = kvl_row(kv, layer, which, head, pos);
    if (kv->type == DT_Q4) { /* block c / 32: byte c % 16 holds values c % 16 and c % 16 + 16 */
        uint8_t b = ((const uint8_t *)row)[c / 32 * 16 + c % 16];
        const uint16_t *d = kvl_scales(kv, layer, which, head, pos);
        return (double)((c % 32 < 16 ? b & 15 : b >> 4) - 8) * dt_f16_to_f32(d[c / 32]);
    }
    double v = kv->type == DT_F32    ? ((const float *)row)[c]
               : kv->type == DT_F16  ? dt_f16_to_f32(((const uint16_t *)row)[c])
               : kv->type == DT_BF16 ? dt_bf16_to_f32(((const uint16_t *)row)[c])
                                     : ((const int8_t *)row)[c];
    return kv->type == DT_I8 ? v * *kvl_scale(kv, layer, which, head, pos) : v;
}

/* Attention of layer 1 of a 2-layer cache, paged (blocks of 4 in scrambled order) or contiguous.
 * The reference is computed in double from what the cache holds after the call; a second check
 * bounds how far the stored rows are from the values they came from. */
static void attention_case(int past, int n, int H, int C, dtype t, int paged)
{
    uint64_t s = (uint64_t)(past * 17 + n + t * 3 + paged);
    int T = past + n, hd = C / H, bt = paged ? 4 : T, nb = (T + bt - 1) / bt;
    kb_kv kv = {.type = t, .n_layer = 2, .n_head = H, .head_dim = hd, .block_tokens = bt};
    kv.block_bytes = kvl_block_bytes(t, 2, H, hd, bt);
    int *table = malloc(sizeof(int) * (size_t)nb);
    for (int i = 0; i < nb; i++) /* blocks in reverse order: positions must go through the table */
        table[i] = paged ? nb - 1 - i : 0;
    kv.table = table;
    kv.base = calloc((size_t)nb, kv.block_bytes);
    float *qkv = malloc(sizeof(float) * n * 3 * C), *y = malloc(sizeof(float) * n * C);
    double *ref = malloc(sizeof(double) * n * C);
    /* past rows stored the way the kernel stores them: run the kernel on the prefix first */
    float *pre = malloc(sizeof(float) * (past ? past : 1) * 3 * C),
          *yp = malloc(sizeof(float) * (past ? past : 1) * C);
    for (int i = 0; i < past * 3 * C; i++)
        pre[i] = rnd(&s) * 2;
    if (past)
        CHECK(be()->attention(be(), yp, pre, &kv, 1, 0, past, NULL) == 0, "prefix failed");
    for (int i = 0; i < n * 3 * C; i++)
        qkv[i] = rnd(&s) * 2;
    CHECK(be()->attention(be(), y, qkv, &kv, 1, past, n, NULL) == 0, "attention failed");
    /* again with one thread (storing the same rows again): the same bits */
    float *y1 = malloc(sizeof(float) * n * C);
    CHECK(be1()->attention(be1(), y1, qkv, &kv, 1, past, n, NULL) == 0 &&
              !memcmp(y, y1, sizeof(float) * n * C),
          "attention %s past=%d n=%d H=%d: one thread's differs from two threads'", dt_name(t),
          past, n, H);
    free(y1);
    double tol = t == DT_F32  ? 1e-6
                 : t == DT_Q4 ? 0.13 /* a step of 2 / 8 where q4_0 clamps (q = 15 is 7 / 8 of m) */
                 : t == DT_I8 ? 0.02
                 : t == DT_BF16 ? 0.01
                                : 0.001,
           worst = 0;
    for (int tok = 0; tok < n; tok++)
        for (int h = 0; h < H; h++) {
            for (int c = 0; c < hd; c++) { /* stored rows are close to their sources */
                double want = qkv[tok * 3 * C + C + h * hd + c];
                worst = fmax(worst, fabs(cached(&kv, 1, 0, h, past + tok, c) - want) / 2.0);
            }
            int len = past + tok + 1;
            double *sc = malloc(sizeof(double) * len), mx = -1e300, sum = 0;
            for (int j = 0; j < len; j++) {
                double d = 0;
                for (int c = 0; c < hd; c++)
                    d += (double)qkv[tok * 3 * C + h * hd + c] * cached(&kv, 1, 0, h, j, c);
                sc[j] = d / sqrt(hd);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < len; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int c = 0; c < hd; c++) {
                double o = 0;
                for (int j = 0; j < len; j++)
                    o += sc[j] / sum * cached(&kv, 1, 1, h, j, c);
                ref[tok * C + h * hd + c] = o;
            }
            free(sc);
        }
    double e = rel_l2(y, ref, (size_t)n * C);
    CHECK(e < 1e-5, "attention %s %s past=%d n=%d: rel err %.3g", dt_name(t),
          paged ? "paged" : "contiguous", past, n, e);
    CHECK(worst < tol, "%s rows stored %.3g away from their values (limit %.3g)", dt_name(t), worst,
          tol);
    free(pre);
    free(yp);
    free(table);
    free(kv.base);
    free(qkv);
    free(y);
    free(ref);
}

static void attention_all(void)
{
    dtype types[4] = {DT_F32, DT_F16, DT_BF16, DT_I8};
    for (int t = 0; t < 4; t++)
        for (int paged = 0; paged < 2; paged++) {
            attention_case(0, 1, 2, 16, types[t], paged);
            attention_case(13, 1, 3, 24, types[t], paged);
            attention_case(9, 5, 2, 16, types[t], paged);
            attention_case(40, 1, 2, 128, types[t],
                           paged); /* head dim 64: 16 keys at a time, a tail */
            attention_case(21, 3, 1, 16, types[t], paged);  /* head dim 16 */
            attention_case(37, 2, 5, 320, types[t], paged); /* 64 wide, heads split unevenly */
            attention_case(0, 70, 2, 32, types[t], paged);  /* GEMM path, two row blocks */
            attention_case(11, 20, 4, 32, types[t], paged); /* GEMM path after a cached prefix */
        }
    for (int paged = 0; paged < 2; paged++) { /* q4 rows: heads of whole blocks of 32 */
        attention_case(0, 1, 2, 64, DT_Q4, paged);
        attention_case(9, 5, 2, 64, DT_Q4, paged);
        attention_case(40, 1, 2, 128, DT_Q4, paged);
        attention_case(37, 2, 5, 320, DT_Q4, paged);
        attention_case(0, 70, 2, 128, DT_Q4, paged);  /* GEMM path */
        attention_case(11, 20, 4, 128, DT_Q4, paged); /* GEMM path after a cached prefix */
        attention_case(13, 2, 1, 512, DT_Q4, paged);  /* a head of 512: runs of 8 rows */
    }
}

/* q8 as its definition: a block of 32 is scaled by max|v| / 127 (weights: the scale kept as f16)
 * and rounded half away from zero; an output is the sum over blocks of both scales times the
 * integer dot */
static void q8_ref_block(const float *v, double *q, double *d, int f16_scale)
{
    double amax = 0;
    for (int i = 0; i < 32; i++)
        amax = fmax(amax, fabs(v[i]));
    double dd = (float)(amax / 127.0); /* computed in float, as the kernel does */
    for (int i = 0; i < 32; i++)
        q[i] = dd > 0 ? round(v[i] * (float)(1.0f / (float)dd)) : 0;
    if (f16_scale) {
        uint16_t h = dt_f32_to_f16((float)dd);
        dd = dt_f16_to_f32(h);
    }
    *d = dd;
}

/* q4_0 as llama.cpp defines it, in its float operations: m the block's value of largest magnitude
 * (the first such), d = m / -8, q = min(15, (int)(x / d + 8.5)) with x / d as x * (1 / d); the
 * value (q - 8) * d with d kept as f16 */
static void q4_ref_block(const float *v, double *q, double *d)
{
    float m = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(v[i]) > fabsf(m))
            m = v[i];
    float dd = m / -8.0f, id = dd != 0 ? 1.0f / dd : 0.0f;
    for (int i = 0; i < 32; i++) {
        float t = v[i] * id + 8.5f;
        int qi = (int)t;
        q[i] = (qi < 15 ? qi : 15) - 8;
    }
    *d = dt_f16_to_f32(dt_f32_to_f16(dd));
}

/* the 6-bit blocks' rule (dtype.h) in the same float operations: d = m / -32, q = min(63, (int)(x
 * * (1 / d) + 32.5)), the value q - 32 with d kept as f16 */
static void q6_ref_block(const float *v, double *q, double *d)
{
    float m = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(v[i]) > fabsf(m))
            m = v[i];
    float dd = m / -32.0f, id = dd != 0 ? 1.0f / dd : 0.0f;
    for (int i = 0; i < 32; i++) {
        int qi = (int)(v[i] * id + 32.5f);
        q[i] = (qi < 63 ? qi : 63) - 32;
    }
    *d = dt_f16_to_f32(dt_f32_to_f16(dd));
}

/* A 6-bit row's sum as q6.c defines it: each block's integer times d_w * d_x (f32), added by one
 * fused multiply-add, block after block */
static float q6_sum(const double *wq, const double *wd, const double *xq, const double *xd,
                    int blocks)
{
    float acc = 0;
    for (int b = 0; b < blocks; b++) {
        double dot = 0;
        for (int i = 0; i < 32; i++)
            dot += wq[32 * b + i] * xq[32 * b + i];
        acc = fmaf((float)wd[b] * (float)xd[b], (float)dot, acc);
    }
    return acc;
}

/* The LM head's 6-bit rows packed in the backend's groups (where it packs them): matmul_t the
 * same bit for bit with one thread and two, the embedding's rows the same values, and matmul
 * refused (the groups are rows, not matmul's columns) */
static void q6_packed_case(const kb_mat *mt, const float *x, int n)
{
    kb_mat pk;
    CHECK(be()->pack(be(), &pk, mt) == 0, "pack failed");
    if (!pk.data)
        return;
    size_t len = (size_t)n * mt->rows;
    float *y = malloc(sizeof(float) * len), *yp = malloc(sizeof(float) * len);
    for (int b = 0; b < 2; b++) {
        kb_backend *k = b ? be1() : be();
        CHECK(k->matmul_t(k, y, x, n, mt) == 0 && k->matmul_t(k, yp, x, n, &pk) == 0,
              "matmul_t failed");
        CHECK(!memcmp(y, yp, sizeof(float) * len),
              "packed q6 n=%d [%d, %d] (%d thread(s)) differs from its rows", n, mt->rows, mt->cols,
              k->threads);
    }
    int ids[3] = {0, mt->rows - 1, mt->rows / 2};
    float *e = malloc(sizeof(float) * 3 * mt->cols), *ep = malloc(sizeof(float) * 3 * mt->cols);
    float *pos = calloc((size_t)3 * mt->cols, sizeof(float));
    kb_mat wpe = {.data = pos, .type = DT_F32, .rows = 3, .cols = mt->cols};
    CHECK(be()->embed(be(), e, ids, 3, 0, mt, &wpe) == 0 &&
              be()->embed(be(), ep, ids, 3, 0, &pk, &wpe) == 0 &&
              !memcmp(e, ep, sizeof(float) * 3 * mt->cols),
          "packed q6 [%d, %d]: the embedding's rows differ", mt->rows, mt->cols);
    CHECK(be()->matmul(be(), y, x, n, &pk, NULL, KB_LINEAR) != 0,
          "matmul took the packed LM head's rows as its columns");
    be()->release(be(), (void *)pk.data);
    free(y), free(yp), free(e), free(ep), free(pos);
}

/* the product of 8-, 6- or 4-bit weights (t) against its definition */
static void quant_case(dtype t, int n, int K, int N, int with_bias, kb_act act)
{
    uint64_t s = (uint64_t)(n * 977 + K * 13 + N + t);
    int blocks = K / 32;
    const char *tn = dt_name(t);
    float *x = malloc(sizeof(float) * n * K), *w = malloc(sizeof(float) * K * N),
          *bias = malloc(sizeof(float) * N);
    float *col = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * n * N);
    uint8_t *q = malloc(dt_bytes(t, (size_t)N * K));
    uint16_t *sc = malloc(sizeof(uint16_t) * N * blocks);
    double *ref = malloc(sizeof(double) * n * N), *wq = malloc(sizeof(double) * N * K),
           *wd = malloc(sizeof(double) * N * blocks);
    for (int i = 0; i < n * K; i++)
        x[i] = rnd(&s) * (i % 7 == 0 ? 5 : 1);
    for (int i = 0; i < K * N; i++)
        w[i] = rnd(&s) * 0.3f;
    for (int j = 0; j < N; j++)
        bias[j] = rnd(&s);
    /* matmul's W [K, N] stored by output column; the reference quantises the same columns itself */
    for (int j = 0; j < N; j++) {
        for (int k = 0; k < K; k++)
            col[k] = w[k * N + j];
        if (t == DT_Q4)
            dt_q4_quantize(q + dt_bytes(t, (size_t)j * K), sc + (size_t)j * blocks, col, (size_t)K);
        else if (t == DT_Q6)
            dt_q6_quantize(q + dt_bytes(t, (size_t)j * K), sc + (size_t)j * blocks, col, (size_t)K);
        else
            dt_q8_quantize((int8_t *)q + (size_t)j * K, sc + (size_t)j * blocks, NULL, col,
                           (size_t)K);
        for (int b = 0; b < blocks; b++)
            if (t == DT_Q4)
                q4_ref_block(col + 32 * b, wq + (size_t)j * K + 32 * b,
                             wd + (size_t)j * blocks + b);
            else if (t == DT_Q6)
                q6_ref_block(col + 32 * b, wq + (size_t)j * K + 32 * b,
                             wd + (size_t)j * blocks + b);
            else
                q8_ref_block(col + 32 * b, wq + (size_t)j * K + 32 * b, wd + (size_t)j * blocks + b,
                             1);
    }
    for (int r = 0; r < n; r++) {
        double xq[32], xd;
        for (int j = 0; j < N; j++)
            ref[r * N + j] = with_bias ? bias[j] : 0;
        for (int b = 0; b < blocks; b++) {
            q8_ref_block(x + (size_t)r * K + 32 * b, xq, &xd, 0);
            for (int j = 0; j < N; j++) {
                double dot = 0;
                for (int i = 0; i < 32; i++)
                    dot += xq[i] * wq[(size_t)j * K + 32 * b + i];
                ref[r * N + j] += wd[(size_t)j * blocks + b] * xd * dot;
            }
        }
    }
    kb_mat m = {.data = q, .type = t, .rows = K, .cols = N, .scales = sc};
    float *y1 = malloc(sizeof(float) * n * N);
    CHECK(be()->matmul(be(), y, x, n, &m, with_bias ? bias : NULL, act) == 0 &&
              be1()->matmul(be1(), y1, x, n, &m, with_bias ? bias : NULL, act) == 0,
          "%s matmul failed", tn);
    CHECK(!memcmp(y, y1, sizeof(float) * n * N),
          "%s matmul n=%d K=%d N=%d: one thread's differs from two threads'", tn, n, K, N);
    packed_case(&m, x, n, with_bias ? bias : NULL); /* q4: packed, the same sums bit for bit */
    /* decode's own loop against the few-token products' sums, bit for bit: the token last among
     * 2..8 others (a verify pass's rows are decode steps) */
    for (int many = 2; many <= 8 && n == 1; many++) {
        float *x2 = malloc(sizeof(float) * many * K), *y2 = malloc(sizeof(float) * many * N);
        for (int i = 0; i < (many - 1) * K; i++)
            x2[i] = (float)((i * 7919) % 201 - 100) / 37.0f;
        memcpy(x2 + (size_t)(many - 1) * K, x, sizeof(float) * K);
        CHECK(be()->matmul(be(), y2, x2, many, &m, with_bias ? bias : NULL, act) == 0 &&
                  !memcmp(y, y2 + (size_t)(many - 1) * N, sizeof(float) * N),
              "%s decode K=%d N=%d differs from the same token among %d", tn, K, N, many);
        free(x2);
        free(y2);
    }
    free(y1);
    for (int i = 0; i < n * N && act == KB_GELU; i++) {
        double v = ref[i];
        ref[i] = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    }
    double e = rel_l2(y, ref, (size_t)n * N);
    CHECK(e < 1e-6, "%s matmul n=%d K=%d N=%d: rel err %.3g", tn, n, K, N, e);
    if (act == KB_GELU)
        goto done; /* matmul_t has no activation */
    /* the LM head's layout: the same stored rows read as matmul_t's [N, K] */
    kb_mat mt = {.data = q, .type = t, .rows = N, .cols = K, .scales = sc};
    CHECK(be()->matmul_t(be(), y, x, n, &mt) == 0, "%s matmul_t failed", tn);
    for (int i = 0; i < n * N && with_bias; i++)
        ref[i] -= bias[i % N];
    e = rel_l2(y, ref, (size_t)n * N);
    CHECK(e < 1e-6, "%s matmul_t n=%d K=%d N=%d: rel err %.3g", tn, n, K, N, e);
    /* the LM head's 6-bit sums are defined to the bit for the streamed token counts */
    for (int r = 0; t == DT_Q6 && n <= 8 && r < n; r++) {
        double xq[8192], xd[256];
        for (int b = 0; b < blocks; b++)
            q8_ref_block(x + (size_t)r * K + 32 * b, xq + 32 * b, xd + b, 0);
        int same = 1;
        for (int j = 0; j < N; j++)
            same &= y[(size_t)r * N + j] ==
                    q6_sum(wq + (size_t)j * K, wd + (size_t)j * blocks, xq, xd, blocks);
        CHECK(same, "q6 matmul_t n=%d K=%d N=%d: token %d's sums are not the definition's bits", n,
              K, N, r);
    }
    if (t == DT_Q6)
        q6_packed_case(&mt, x, n);
    /* against the unquantised product: what the type costs (a wrong layout costs everything) */
    double num = 0, den = 0;
    for (int r = 0; r < n; r++)
        for (int j = 0; j < N; j++) {
            double a = 0;
            for (int k = 0; k < K; k++)
                a += (double)x[r * K + k] * w[k * N + j];
            num += (y[r * N + j] - a) * (y[r * N + j] - a);
            den += a * a;
        }
    double most = t == DT_Q4 ? 0.15 : t == DT_Q6 ? 4e-2 : 2e-2;
    CHECK(sqrt(num / den) < most, "%s against f32: rel err %.3g", tn, sqrt(num / den));
done:
    free(x);
    free(w);
    free(bias);
    free(col);
    free(y);
    free(q);
    free(sc);
    free(ref);
    free(wq);
    free(wd);
}

static void quant_cases(dtype t)
{
    quant_case(t, 1, 64, 96, 1, KB_LINEAR); /* decode */
    /* decode: 19 blocks, an odd one last, scales in two vectors */
    quant_case(t, 1, 608, 20, 0, KB_LINEAR);
    /* decode's GELU, each thread's rows (11 and 12) in groups of 4 and single rows after them */
    quant_case(t, 1, 96, 23, 1, KB_GELU);
    quant_case(t, 5, 96, 33, 1, KB_LINEAR); /* a few tokens, odd column count */
    quant_case(t, 8, 160, 17, 1, KB_GELU);  /* the most a stream takes */
    /* q4 packed in groups of 16 columns: threads' runs of 2 and 3 groups, a few tokens, a GEMM */
    quant_case(t, 1, 608, 80, 0, KB_LINEAR);
    quant_case(t, 5, 96, 48, 1, KB_LINEAR);
    quant_case(t, 8, 160, 32, 1, KB_GELU);
    quant_case(t, 21, 96, 64, 1, KB_GELU);
    quant_case(t, 40, 128, 70, 0, KB_LINEAR); /* prefill */
    quant_case(t, 13, 96, 40, 1, KB_GELU);    /* prefill over an odd block count */
}

static void q8_all(void)
{
    quant_cases(DT_Q8);
    /* the quantiser: a block whose largest magnitude is 127 keeps integers as they are and rounds
     * halves away from zero; zeros stay zero */
    float v[64];
    int8_t q[64];
    uint16_t d[2];
    for (int i = 0; i < 32; i++)
        v[i] = (float)(i * 8 - 127 > 127 ? 127 : i * 8 - 127), v[32 + i] = 0;
    float half[][2] = {{0.5f, 1}, {-0.5f, -1}, {2.5f, 3}, {-2.5f, -3}, {0.49f, 0}, {-126.5f, -127}};
    for (int i = 0; i < 6; i++)
        v[1 + 2 * i] = half[i][0];
    dt_q8_quantize(q, d, NULL, v, 64);
    int ok = dt_f16_to_f32(d[0]) == 1.0f && d[1] == 0;
    for (int i = 0; i < 32; i++)
        ok &= q[i] == (i % 2 && i < 13 ? half[i / 2][1] : v[i]) && q[32 + i] == 0;
    CHECK(ok, "q8 quantiser: scale %g, %g", dt_f16_to_f32(d[0]), dt_f16_to_f32(d[1]));
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
    kb_mat te = {.data = h, .type = DT_BF16, .rows = V, .cols = C},
           pe = {.data = wpe, .type = DT_F32, .rows = P, .cols = C};
    be()->embed(be(), x, (int[]){7, 2}, 2, 3, &te, &pe);
    int ok = 1;
    for (int c = 0; c < C; c++)
        ok &= x[c] == (7 * C + c) * 0.25f + (3 * C + c) &&
              x[C + c] == (2 * C + c) * 0.25f + (4 * C + c);
    CHECK(ok, "embedding rows wrong");
    /* q8 token rows: blocks of 32 along the row, an f16 scale each */
    enum { QC = 64 };
    int8_t tq[3 * QC];
    uint16_t ts[3 * QC / 32];
    float xq[QC], pz[4 * QC] = {0};
    for (int i = 0; i < 3 * QC; i++)
        tq[i] = (int8_t)(i % 200 - 100);
    for (int i = 0; i < 3 * QC / 32; i++)
        ts[i] = dt_f32_to_f16(0.5f * (float)(i + 1));
    kb_mat qe = {.data = tq, .type = DT_Q8, .rows = 3, .cols = QC, .scales = ts},
           qp = {.data = pz, .type = DT_F32, .rows = 4, .cols = QC};
    be()->embed(be(), xq, (int[]){2}, 1, 1, &qe, &qp);
    ok = 1;
    for (int c = 0; c < QC; c++)
        ok &= xq[c] == (float)tq[2 * QC + c] * 0.5f * (float)((2 * QC + c) / 32 + 1);
    CHECK(ok, "q8 embedding rows wrong");
}

/* err_alloc_big: 2 MiB alignment past 2 MiB (huge pages need it), 128 below, a named failure */
static void alloc_big(void)
{
    size_t sizes[] = {1000, (size_t)3 << 20};
    for (int i = 0; i < 2; i++) {
        char *p = err_alloc_big(sizes[i], "a test buffer");
        CHECK(p && (uintptr_t)p % (i ? (size_t)2 << 20 : 128) == 0, "%zu bytes at %p", sizes[i],
              (void *)p);
        if (p) {
            memset(p, 7, sizes[i]);
            CHECK(p[sizes[i] - 1] == 7, "the last byte of %zu", sizes[i]);
        }
        free(p);
    }
    err_fail_allocs_after(0);
    void *p = err_alloc_big(sizes[1], "a test buffer");
    err_fail_allocs_after(-1);
    CHECK(!p && strstr(err_msg(), "a test buffer"), "an injected failure: %p, %s", p, err_msg());
}

/* The vectorised exp and the non-finite scan at their edges: NaN stays NaN (its cast to int was
 * undefined: UBSan aborted a drafter whose weights held +inf), the clamped ends stay finite, and
 * the scan finds the first inf or NaN of each type, unaligned, past a run's end */
static void nonfinite_edges(void)
{
    volatile float nan_ = NAN, inf = INFINITY;
    CHECK(isnan(vm_expf(nan_)) && vm_expf(-inf) >= 0 && vm_expf(-inf) < 1e-37f &&
              isfinite(vm_expf(inf)) && fabsf(vm_expf(1.0f) - 2.7182818f) < 1e-6f,
          "vm_expf: NaN %g, -inf %g, inf %g, 1 %g", vm_expf(nan_), vm_expf(-inf), vm_expf(inf),
          vm_expf(1.0f));
    enum { N = 5000 };
    static float f[N + 1];
    static uint16_t h[N + 1], bh[N + 1];
    for (int i = 0; i <= N; i++) {
        f[i] = (float)i - 2500.5f;
        h[i] = dt_f32_to_f16(f[i] / 1000);
        bh[i] = dt_f32_to_bf16(f[i]);
    }
    CHECK(dt_first_nonfinite(f, DT_F32, N) == N && dt_first_nonfinite(h, DT_F16, N) == N &&
              dt_first_nonfinite(bh, DT_BF16, N) == N,
          "finite values reported as not");
    f[4321] = INFINITY;
    h[4097] = 0x7e00; /* f16 NaN */
    bh[12] = dt_f32_to_bf16(-INFINITY);
    char *un = malloc(sizeof f + 1); /* one byte off: unaligned */
    memcpy(un + 1, f, sizeof f);
    CHECK(dt_first_nonfinite(f, DT_F32, N) == 4321 &&
              dt_first_nonfinite(un + 1, DT_F32, N) == 4321 &&
              dt_first_nonfinite(f, DT_F32, 4321) == 4321 &&
              dt_first_nonfinite(h, DT_F16, N) == 4097 && dt_first_nonfinite(bh, DT_BF16, N) == 12,
          "the first non-finite: f32 %zu, f16 %zu, bf16 %zu", dt_first_nonfinite(f, DT_F32, N),
          dt_first_nonfinite(h, DT_F16, N), dt_first_nonfinite(bh, DT_BF16, N));
    free(un);
}

static void q4_all(void)
{
    quant_cases(DT_Q4);
    /* the quantiser on known values: (i - 16) / 4 has m = -4, so d = 0.5 and q = (i + 1) / 2 (at
     * most 15); value j in byte j's low nibble, j + 16 in its high one; zeros stay zero (q = 8,
     * d = 0 / -8: -0, as llama.cpp stores it) */
    float v[64];
    uint8_t q[32];
    uint16_t d[2];
    for (int i = 0; i < 32; i++)
        v[i] = (float)(i - 16) / 4, v[32 + i] = 0;
    dt_q4_quantize(q, d, v, 64);
    int ok = dt_f16_to_f32(d[0]) == 0.5f && d[1] == 0x8000;
    for (int j = 0; j < 16; j++) {
        int lo = (j + 1) / 2, hi = (j + 17) / 2 < 15 ? (j + 17) / 2 : 15;
        ok &= q[j] == (lo | hi << 4) && q[16 + j] == 0x88;
    }
    CHECK(ok, "q4 quantiser: scale %g, %g; bytes %02x %02x %02x", dt_f16_to_f32(d[0]),
          dt_f16_to_f32(d[1]), q[0], q[15], q[16]);
}

static void q6_all(void)
{
    quant_cases(DT_Q6);
    /* the quantiser on known values: (i - 16) / 8 has m = -2, so d = 1 / 16 and q = 2 * i (at
     * most 63), value i in bits 6i..6i + 5; zeros stay zero (q = 32, d = -0) */
    float v[64];
    uint8_t q[48];
    uint16_t d[2];
    for (int i = 0; i < 32; i++)
        v[i] = (float)(i - 16) / 8, v[32 + i] = 0;
    dt_q6_quantize(q, d, v, 64);
    int ok = dt_f16_to_f32(d[0]) == 0.0625f && d[1] == 0x8000;
    for (int i = 0; i < 32; i++) {
        int want = 2 * i < 63 ? 2 * i : 63, bit = 6 * i;
        unsigned got = (q[bit / 8] | (bit / 8 + 1 < 24 ? q[bit / 8 + 1] << 8 : 0)) >> bit % 8;
        ok &= (int)(got & 63) == want && dt_q6_value(q, i) == want - 32 &&
              dt_q6_value(q + 24, i) == 0;
    }
    CHECK(ok, "q6 quantiser: scale %g, %g; bytes %02x %02x %02x", dt_f16_to_f32(d[0]),
          dt_f16_to_f32(d[1]), q[0], q[1], q[23]);
}

TEST_TABLE(kernel_tests, {"kernels/matmul_vs_definition", matmul_all},
           {"kernels/q8_vs_definition", q8_all}, {"kernels/q4_vs_definition", q4_all},
           {"kernels/q6_vs_definition", q6_all}, {"kernels/sums_at_once", sums_at_once},
           {"kernels/layernorm_gelu_add", layernorm_gelu_add},
           {"kernels/attention_vs_definition", attention_all}, {"kernels/embed", embed},
           {"kernels/alloc_big", alloc_big}, {"kernels/nonfinite_edges", nonfinite_edges});
