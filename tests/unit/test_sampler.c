/* Sampling rules, checked by their definitions and by frequencies over many draws. */
#include <math.h>
#include <string.h>

#include "../../model/sampler.h"
#include "check.h"

static void greedy_and_penalty(void)
{
    sampler s;
    sampler_params p = {.temp = 0, .top_k = 0, .top_p = 1, .repeat_penalty = 1};
    sampler_init(&s, &p, 5);
    float l[5] = {0.1f, 2.0f, 1.9f, -1, 0};
    CHECK(sampler_next(&s, l, NULL, 0) == 1, "greedy is not argmax");
    sampler_free(&s);
    p.repeat_penalty = 1.5f;
    sampler_init(&s, &p, 5);
    float m[5] = {0.1f, 2.0f, 1.9f, -1, 0};
    CHECK(sampler_next(&s, m, (int[]){1, 1, 3}, 3) == 2, "penalty did not demote id 1");
    CHECK(fabsf(m[1] - 2.0f / 1.5f) < 1e-6f && fabsf(m[3] + 1.5f) < 1e-6f, "penalty rule (divide positive, multiply negative)");
    sampler_free(&s);
}

static void frequencies(void)
{
    /* temperature 1, no truncation: draws follow softmax */
    float base[4] = {0, 1, 2, -1};
    double z = 0, want[4];
    for (int i = 0; i < 4; i++)
        z += exp(base[i]);
    for (int i = 0; i < 4; i++)
        want[i] = exp(base[i]) / z;
    sampler s;
    sampler_params p = {.temp = 1, .top_k = 0, .top_p = 1, .repeat_penalty = 1, .seed = 5};
    sampler_init(&s, &p, 4);
    int cnt[4] = {0};
    enum { N = 40000 };
    for (int i = 0; i < N; i++) {
        float l[4];
        memcpy(l, base, sizeof l);
        cnt[sampler_next(&s, l, NULL, 0)]++;
    }
    for (int i = 0; i < 4; i++)
        CHECK(fabs(cnt[i] / (double)N - want[i]) < 0.01, "id %d drawn %.3f, softmax %.3f", i, cnt[i] / (double)N, want[i]);
    sampler_free(&s);
    /* top-k 2 keeps only ids 2 and 1; top-p 0.5 keeps only id 2 (p = 0.64) */
    p.top_k = 2;
    sampler_init(&s, &p, 4);
    int seen[4] = {0};
    for (int i = 0; i < 2000; i++) {
        float l[4];
        memcpy(l, base, sizeof l);
        seen[sampler_next(&s, l, NULL, 0)]++;
    }
    CHECK(!seen[0] && !seen[3] && seen[1] && seen[2], "top-k 2 drew outside the top two");
    sampler_free(&s);
    p.top_k = 0;
    p.top_p = 0.5f;
    sampler_init(&s, &p, 4);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 500; i++) {
        float l[4];
        memcpy(l, base, sizeof l);
        seen[sampler_next(&s, l, NULL, 0)]++;
    }
    CHECK(seen[2] == 500, "top-p 0.5 drew other than the most likely id");
    sampler_free(&s);
}

static void seeded(void)
{
    int a[50], b[50], c[50];
    for (int run = 0; run < 3; run++) {
        sampler s;
        sampler_params p = {.temp = 1.2f, .top_k = 40, .top_p = 0.9f, .repeat_penalty = 1, .seed = run == 2 ? 8 : 7};
        sampler_init(&s, &p, 1000);
        for (int i = 0; i < 50; i++) {
            float l[1000];
            for (int j = 0; j < 1000; j++)
                l[j] = sinf(j * 0.1f) * 3;
            (run == 0 ? a : run == 1 ? b : c)[i] = sampler_next(&s, l, NULL, 0);
        }
        sampler_free(&s);
    }
    CHECK(!memcmp(a, b, sizeof a), "same seed gave different draws");
    CHECK(memcmp(a, c, sizeof a), "different seeds gave the same 50 draws");
}

TEST_TABLE(sampler_tests, {"sampler/greedy_and_penalty", greedy_and_penalty}, {"sampler/frequencies", frequencies},
           {"sampler/seeded", seeded});
