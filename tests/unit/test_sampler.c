/* The sampling rule (kernels/cpu/sample.c, the reference for every backend): cases worked out by
 * hand from its definition, frequencies over many draws against softmax, and the seeded stream. */
#include <math.h>
#include <string.h>

#include "../../kernels/cpu/cpu.h"
#include "../../model/sampler.h"
#include "check.h"

static kb_backend *cpu(void)
{
    static kb_backend *b;
    if (!b)
        b = kb_create("cpu", 1);
    return b;
}

static int pick(const float *l, int V, float temp, int top_k, float top_p, float penalty, double u,
                const int *hist, int n_hist)
{
    kb_sample s = {.temp = temp,
                   .top_p = top_p,
                   .repeat_penalty = penalty,
                   .top_k = top_k,
                   .u = u,
                   .history = hist,
                   .n_history = n_hist};
    int id = -1;
    if (cpu()->sample(cpu(), &id, l, V, &s))
        return -2;
    return id;
}

static void greedy_and_penalty(void)
{
    const float l[5] = {0.1f, 2.0f, 1.9f, -1, 0};
    CHECK(pick(l, 5, 0, 0, 1, 1, 0, NULL, 0) == 1, "greedy is not argmax");
    /* 2.0 / 1.5 = 1.33 falls below 1.9; id 3 (-1 * 1.5) stays last; the logits are left as they
     * were */
    CHECK(pick(l, 5, 0, 0, 1, 1.5f, 0, (int[]){1, 1, 3}, 3) == 2, "penalty did not demote id 1");
    CHECK(l[1] == 2.0f && l[3] == -1.0f, "sampling changed its input logits");
    /* penalised once however often it repeats: 1.9 / 1.5 = 1.27 still beats 1.0; 1.9 / 1.5^2 = 0.84
     * would not */
    const float m[3] = {1.9f, 1.0f, 0};
    CHECK(pick(m, 3, 0, 0, 1, 1.5f, 0, (int[]){0, 0, 0}, 3) == 0,
          "a repeated id was penalised more than once");
    CHECK(pick((float[]){-1, -1.2f, -5}, 3, 0, 0, 1, 1.5f, 0, (int[]){0}, 1) == 1,
          "a negative logit must be multiplied by the penalty");
    CHECK(pick((float[]){3, 3, 1}, 3, 0, 0, 1, 1, 0, NULL, 0) == 0,
          "greedy ties go to the lowest id");
}

/* logits {0, 1, 2, -1} at temp 1: p = {0.0871, 0.2369, 0.6439, 0.0321} */
static const float BASE[4] = {0, 1, 2, -1};

static void thresholds(void)
{
    /* top-k 2 keeps ids 1 and 2; walking in id order, id 1 holds the first 0.2369 / 0.8808 = 0.269
     */
    CHECK(pick(BASE, 4, 1, 2, 1, 1, 0.0, NULL, 0) == 1, "top-k 2, u=0: not id 1");
    CHECK(pick(BASE, 4, 1, 2, 1, 1, 0.26, NULL, 0) == 1, "top-k 2, u=0.26: not id 1");
    CHECK(pick(BASE, 4, 1, 2, 1, 1, 0.28, NULL, 0) == 2, "top-k 2, u=0.28: not id 2");
    CHECK(pick(BASE, 4, 1, 2, 1, 1, 0.999999, NULL, 0) == 2, "top-k 2, u near 1: not id 2");
    /* no truncation: id 0 holds [0, 0.0871), id 1 [0.0871, 0.3240), id 2 up to 0.9679, id 3 the
     * rest */
    CHECK(pick(BASE, 4, 1, 0, 1, 1, 0.08, NULL, 0) == 0, "u=0.08: not id 0");
    CHECK(pick(BASE, 4, 1, 0, 1, 1, 0.09, NULL, 0) == 1, "u=0.09: not id 1");
    CHECK(pick(BASE, 4, 1, 0, 1, 1, 0.97, NULL, 0) == 3, "u=0.97: not id 3");
    /* top-p 0.7: 0.6439 alone is short of it, with 0.2369 it reaches 0.8808: ids 1 and 2 */
    CHECK(pick(BASE, 4, 1, 0, 0.7f, 1, 0.0, NULL, 0) == 1, "top-p 0.7 dropped id 1");
    CHECK(pick(BASE, 4, 1, 0, 0.7f, 1, 0.5, NULL, 0) == 2, "top-p 0.7, u=0.5: not id 2");
    /* top-p 0.6: the most likely id alone */
    for (double u = 0; u < 1; u += 0.125)
        CHECK(pick(BASE, 4, 1, 0, 0.6f, 1, u, NULL, 0) == 2, "top-p 0.6, u=%.3f: not id 2", u);
    /* ties at the top-k threshold are all kept: three equal ids with top-k 1, u=0.5 lands in the
     * second */
    CHECK(pick((float[]){1, 1, 1, 0}, 4, 1, 1, 1, 1, 0.5, NULL, 0) == 1,
          "ties at the top-k threshold were not kept");
    /* a low temperature sharpens: at 0.1, id 1 is e^-10 of id 2 and u=0.5 must land on id 2 */
    CHECK(pick(BASE, 4, 0.1f, 0, 1, 1, 0.5, NULL, 0) == 2, "temperature 0.1 did not sharpen");
}

static int draw(sampler *s, const float *l, int V)
{
    kb_sample k = sampler_draw(s, NULL, 0);
    int id = -1;
    return cpu()->sample(cpu(), &id, l, V, &k) ? -2 : id;
}

static void frequencies(void)
{
    /* temperature 1, no truncation: draws follow softmax */
    double z = 0, want[4];
    for (int i = 0; i < 4; i++)
        z += exp(BASE[i]);
    for (int i = 0; i < 4; i++)
        want[i] = exp(BASE[i]) / z;
    sampler s;
    sampler_params p = {.temp = 1, .top_k = 0, .top_p = 1, .repeat_penalty = 1, .seed = 5};
    sampler_init(&s, &p);
    int cnt[4] = {0};
    enum { N = 40000 };
    for (int i = 0; i < N; i++) {
        int id = draw(&s, BASE, 4);
        if (id < 0 || id > 3) {
            CHECK(0, "draw %d gave %d", i, id);
            return;
        }
        cnt[id]++;
    }
    for (int i = 0; i < 4; i++)
        CHECK(fabs(cnt[i] / (double)N - want[i]) < 0.01, "id %d drawn %.3f, softmax %.3f", i,
              cnt[i] / (double)N, want[i]);
}

static void seeded(void)
{
    int a[50], b[50], c[50];
    static float l[1000];
    for (int j = 0; j < 1000; j++)
        l[j] = sinf(j * 0.1f) * 3;
    for (int run = 0; run < 3; run++) {
        sampler s;
        sampler_params p = {.temp = 1.2f,
                            .top_k = 40,
                            .top_p = 0.9f,
                            .repeat_penalty = 1,
                            .seed = run == 2 ? 8 : 7};
        sampler_init(&s, &p);
        for (int i = 0; i < 50; i++)
            (run == 0 ? a : run == 1 ? b : c)[i] = draw(&s, l, 1000);
    }
    CHECK(!memcmp(a, b, sizeof a), "same seed gave different draws");
    CHECK(memcmp(a, c, sizeof a), "different seeds gave the same 50 draws");
}

TEST_TABLE(sampler_tests, {"sampler/greedy_and_penalty", greedy_and_penalty},
           {"sampler/thresholds", thresholds}, {"sampler/frequencies", frequencies},
           {"sampler/seeded", seeded});
