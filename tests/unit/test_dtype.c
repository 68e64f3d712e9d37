/* Conversions checked against the IEEE definitions computed with ldexp, not against themselves. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/dtype.h"
#include "check.h"

static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double bf16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}

static void f16_decode_all(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        double want = f16_value((uint16_t)h), got = dt_f16_to_f32((uint16_t)h);
        if (isnan(want))
            CHECK(isnan(got), "f16 %04x: want NaN, got %g", h, got);
        else
            CHECK(got == want, "f16 %04x: want %.10g, got %.10g", h, want, got);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        double want = bf16_value((uint16_t)h), got = dt_bf16_to_f32((uint16_t)h);
        if (isnan(want))
            CHECK(isnan(got), "bf16 %04x: want NaN", h);
        else
            CHECK(got == want, "bf16 %04x: want %.10g, got %.10g", h, want, got);
    }
}

/* nearest representable value, ties to the even code; codes are ordered like magnitudes */
static void check_nearest(float x, uint16_t got, double (*val)(uint16_t), uint16_t max_finite,
                          const char *name)
{
    uint16_t sign = x < 0 ? 0x8000 : 0, mag = got & 0x7fff;
    double ax = fabs((double)x);
    CHECK((got & 0x8000) == sign || ax == 0, "%s(%g): wrong sign", name, x);
    if (mag > max_finite) { /* overflowed to infinity: x must be at least halfway past the largest
                               finite */
        double top = val(max_finite), next = val((uint16_t)(max_finite - 1));
        CHECK(ax >= top + (top - next) / 2, "%s(%g) overflowed to inf", name, x);
        return;
    }
    double err = fabs(val(mag) - ax);
    for (int d = -1; d <= 1; d += 2) {
        int other = mag + d;
        if (other < 0 || other > max_finite)
            continue;
        double e2 = fabs(val((uint16_t)other) - ax);
        CHECK(err < e2 || (err == e2 && (mag & 1) == 0),
              "%s(%.9g) = %04x is not the nearest (neighbour %04x)", name, x, got, other);
    }
}

static void round_to_nearest(void)
{
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t bits = (uint32_t)(s >> 32);
        float x;
        memcpy(&x, &bits, 4);
        if (isnan(x) || isinf(x))
            continue;
        if (i % 2) /* also cover the ranges that matter: around f16's normal and subnormal range */
            x = ldexpf((float)(bits & 0xffffff) / 16777216.0f, (int)(bits >> 24) % 40 - 30) *
                (bits & 1 ? -1 : 1);
        check_nearest(x, dt_f32_to_f16(x), f16_value, 0x7bff, "f16");
        check_nearest(x, dt_f32_to_bf16(x), bf16_value, 0x7f7f, "bf16");
    }
    CHECK(dt_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to f16 infinity");
    CHECK(dt_f32_to_f16(65519.0f) == 0x7bff, "65519 rounds to f16 max");
    CHECK(isnan(dt_bf16_to_f32(dt_f32_to_bf16(NAN))), "bf16 keeps NaN");
    CHECK(isnan(dt_f16_to_f32(dt_f32_to_f16(NAN))), "f16 keeps NaN");
}

static void array_conversion(void)
{
    enum { N = 100000 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    uint16_t *h = malloc(N * 2);
    for (int i = 0; i < N; i++)
        x[i] = (float)sin(i * 0.37) * 3.0f;
    dt_from_f32(h, x, DT_BF16, N);
    dt_to_f32(y, h, DT_BF16, N);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += y[i] != dt_bf16_to_f32(dt_f32_to_bf16(x[i]));
    CHECK(!bad, "%d array elements differ from the scalar conversion", bad);
    /* f16 arrays (vector instructions where the CPU has them) against the scalar functions, with
     * subnormals, overflow, infinities and NaNs among them */
    for (int i = 0; i < N; i++)
        x[i] = i % 97 == 0   ? NAN
               : i % 89 == 0 ? INFINITY
               : i % 83 == 0 ? 70000.0f
                             : (float)sin(i * 0.37) * (i % 3 ? 3.0f : 1e-6f);
    dt_from_f32(h, x, DT_F16, N);
    dt_to_f32(y, h, DT_F16, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t want = dt_f32_to_f16(x[i]);
        float back = dt_f16_to_f32(want);
        bad += h[i] != want || (memcmp(&y[i], &back, 4) != 0);
    }
    CHECK(!bad, "%d f16 array elements differ from the scalar conversion", bad);
    free(x);
    free(y);
    free(h);
}

/* 16-bit values at an odd address (a tensor in place in a file whose header length is odd): the
 * same floats as from an aligned copy, and no misaligned load (UBSan's build aborts on one) */
static void unaligned_source(void)
{
    enum { N = 37 };
    unsigned char raw[2 * N + 1];
    uint16_t h[N];
    float y[N], want[N];
    dtype types[2] = {DT_BF16, DT_F16};
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < N; i++)
            h[i] = types[t] == DT_BF16 ? dt_f32_to_bf16(i * 0.7f - 9) : dt_f32_to_f16(i * 0.7f - 9);
        memcpy(raw + 1, h, sizeof h);
        dt_to_f32(want, h, types[t], N);
        dt_to_f32(y, raw + 1, types[t], N);
        CHECK(!memcmp(y, want, sizeof y), "%s from an odd address differs", dt_name(types[t]));
    }
}

TEST_TABLE(dtype_tests, {"dtype/unaligned_16bit_source", unaligned_source},
           {"dtype/decode_all_16bit", f16_decode_all},
           {"dtype/round_to_nearest_even", round_to_nearest},
           {"dtype/array_matches_scalar", array_conversion});
