#include "model_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/cmd/commands.h"
#include "../../kernels/err.h"
#include "check.h"

enum { MAX_FIXTURES = 16 };

const char *fixture_checkpoint(int layers, int ctx, int seed, int vocab, const char *dtype_name)
{
    return fixture_shaped(layers, 4, 32, ctx, seed, vocab, dtype_name);
}

const char *fixture_shaped(int layers, int heads, int embd, int ctx, int seed, int vocab,
                           const char *dtype_name)
{
    static char dirs[MAX_FIXTURES][4200];
    static char keys[MAX_FIXTURES][64];
    char key[64];
    snprintf(key, sizeof key, "%s-%d-l%d-h%d-e%d-s%d-v%d", dtype_name, ctx, layers, heads, embd,
             seed, vocab);
    int i = 0;
    for (; i < MAX_FIXTURES && keys[i][0]; i++)
        if (!strcmp(keys[i], key))
            return dirs[i];
    if (i == MAX_FIXTURES)
        return NULL;
    snprintf(keys[i], sizeof keys[i], "%s", key);
    snprintf(dirs[i], sizeof dirs[i], "%s/m-%s", temp_dir(), key);
    char ctx_s[16], layers_s[16], seed_s[16], vocab_s[16], heads_s[16], embd_s[16];
    snprintf(heads_s, sizeof heads_s, "%d", heads);
    snprintf(embd_s, sizeof embd_s, "%d", embd);
    snprintf(ctx_s, sizeof ctx_s, "%d", ctx);
    snprintf(layers_s, sizeof layers_s, "%d", layers);
    snprintf(seed_s, sizeof seed_s, "%d", seed);
    snprintf(vocab_s, sizeof vocab_s, "%d", vocab);
    char *argv[] = {"make-tiny-model", dirs[i],
                    "--layers",        layers_s,
                    "--heads",         heads_s,
                    "--embd",          embd_s,
                    "--ctx",           ctx_s,
                    "--seed",          seed_s,
                    "--dtype",         (char *)dtype_name,
                    "--vocab",         vocab_s};
    if (cmd_make_tiny_model(vocab ? 16 : 14, argv))
        printf("make-tiny-model: %s\n", err_msg());
    return dirs[i];
}

const char *fixture_model(const char *dtype_name, int ctx)
{
    return fixture_checkpoint(2, ctx, 3, 0, dtype_name);
}

int fixture_decode(gpt2_model *m, kb_backend *b, kv_pool *pool, drafter *d,
                   const sampler_params *sp, const int *prompt, int n, int n_predict, int *out,
                   spec_stats *stats)
{
    int *ids = malloc(sizeof *ids * (size_t)(n + n_predict)), next, made = 0, rc = -1;
    kv_seq *cache = kv_seq_new(pool, 0);
    spec *s = d ? spec_new(m, b, d) : NULL;
    sampler smp;
    sampler_init(&smp, sp);
    if (!ids || !cache || (d && !s))
        goto out;
    memcpy(ids, prompt, sizeof *ids * (size_t)n);
    kb_sample pick = sampler_draw(&smp, ids, n);
    if (gpt2_step(m, b, cache, ids, n, &pick, &next, NULL))
        goto out;
    while (made < n_predict) {
        ids[n++] = out[made++] = next;
        if (made == n_predict)
            break;
        if (s) {
            if (spec_next(s, cache, ids, n, &smp, n_predict - made, &next, NULL))
                goto out;
        } else {
            pick = sampler_draw(&smp, ids, n);
            if (gpt2_step(m, b, cache, ids + n - 1, 1, &pick, &next, NULL))
                goto out;
        }
    }
    if (stats)
        *stats = *spec_get_stats(s);
    rc = 0;
out:
    spec_free(s);
    kv_seq_free(cache);
    free(ids);
    return rc;
}
