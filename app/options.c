#include "options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kernels/err.h"
#include "files.h"
#include "selftest.h"

int opt_match(int argc, char **argv, int *i, const char *shortname, const char *longname,
              const char **value)
{
    const char *a = argv[*i];
    const char *names[2] = {shortname, longname};
    for (int k = 0; k < 2; k++) {
        if (!names[k])
            continue;
        size_t n = strlen(names[k]);
        if (!strcmp(a, names[k])) {
            if (!value)
                return 1;
            if (*i + 1 >= argc) {
                err_set("%s needs a value", names[k]);
                return -1;
            }
            *value = argv[++*i];
            return 1;
        }
        if (value && !strncmp(a, names[k], n) && a[n] == '=' && names[k][1] == '-') {
            *value = a + n + 1;
            return 1;
        }
    }
    return 0;
}

int opt_int(const char *flag, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return err_set("%s: expected an integer from %ld to %ld, got '%s'", flag, lo, hi, s);
    *out = (int)v;
    return 0;
}

int opt_float(const char *flag, const char *s, double lo, double hi, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return err_set("%s: expected a number from %g to %g, got '%s'", flag, lo, hi, s);
    *out = (float)v;
    return 0;
}

int opt_u64(const char *flag, const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        return err_set("%s: expected a non-negative integer, got '%s'", flag, s);
    *out = v;
    return 0;
}

int opt_size(const char *flag, const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024.0 * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't')
        mul = 1024.0 * 1024 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b' || (*end == 'i' && end[1] == 'B'))
        end += *end == 'i' ? 2 : 1;
    if (errno || end == s || *end || !(v > 0))
        return err_set("%s: expected a size such as 512M or 2G, got '%s'", flag, s);
    if (v * mul > 1e15)
        return err_set("%s: '%s' is more than the largest size, 1e15 bytes (909T)", flag, s);
    *out = (size_t)(v * mul);
    return 0;
}

static int cache_opt(model_opts *o, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
#define MATCH(l) ((r = opt_match(argc, argv, i, NULL, l, &v)) != 0)
    /* llama-cli's spellings too (-c, --ctx-size), as users bring them */
    if (MATCH("--ctx") || (r = opt_match(argc, argv, i, "-c", "--ctx-size", &v)) != 0) {
        if (r > 0 && opt_int("--ctx", v, 1, 65536, &o->kv.window))
            return -1;
    } else if (MATCH("--cache-mem")) {
        if (r > 0 && opt_size("--cache-mem", v, &o->kv.pool_bytes))
            return -1;
    } else if (MATCH("--block-tokens")) {
        if (r > 0 && opt_int("--block-tokens", v, 1, KV_MAX_BLOCK_TOKENS, &o->kv.block_tokens))
            return -1;
    } else if (MATCH("--grow-factor")) {
        if (r > 0 && opt_float("--grow-factor", v, 1.01, 16, &o->kv.grow_factor))
            return -1;
    } else if (MATCH("--cache-layout")) {
        if (r > 0 && strcmp(v, "paged") && strcmp(v, "contiguous"))
            return err_set("--cache-layout: expected paged or contiguous, got '%s'", v);
        if (r > 0)
            o->kv.layout = strcmp(v, "paged") ? KV_CONTIGUOUS : KV_PAGED;
    } else if (MATCH("--cache-dtype")) {
        if (r > 0 && (dt_parse(v, &o->kv.type) || o->kv.type == DT_Q8))
            return err_set("--cache-dtype: expected f32, f16, bf16, int8 or q4, got '%s'", v);
        o->kv_type_set = 1;
    } else if (opt_match(argc, argv, i, NULL, "--prealloc", NULL)) {
        o->kv.prealloc = 1;
        return 1;
    } else {
        return 0;
    }
#undef MATCH
    return r < 0 ? -1 : 1;
}

int model_opts_parse(model_opts *o, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
    unsigned long long u;
#define MATCH(s, l) ((r = opt_match(argc, argv, i, s, l, &v)) != 0)
    if (MATCH("-m", "--model")) {
        o->model_dir = v;
    } else if (MATCH(NULL, "--device")) {
        if (r > 0 && strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
            return err_set("--device: expected auto, cpu or cuda, got '%s'", v);
        o->device = v;
    } else if (MATCH(NULL, "--gpu-kernels")) {
        if (r > 0 && strcmp(v, "fast") && strcmp(v, "basic"))
            return err_set("--gpu-kernels: expected fast or basic, got '%s'", v);
        o->kernels = r > 0 && !strcmp(v, "basic") ? KB_KERNELS_BASIC : KB_KERNELS_FAST;
        o->kernels_set = 1;
    } else if (MATCH(NULL, "--dtype")) {
        o->wtype_set = 1;
        if (r > 0 && (dt_parse(v, &o->wtype) || o->wtype == DT_I8))
            return err_set("--dtype: expected f32, bf16, f16, q8 or q4, got '%s'", v);
    } else if (opt_match(argc, argv, i, "-v", "--verbose", NULL)) {
        o->verbose = 1;
        r = 1;
    } else if (MATCH("-t", "--threads")) {
        if (r > 0 && opt_int("--threads", v, 1, 1024, &o->threads))
            return -1;
    } else if (MATCH("-n", "--max-tokens") || MATCH(NULL, "--n-predict")) {
        if (r > 0 && opt_int("--max-tokens", v, 0, 1 << 20, &o->n_predict))
            return -1;
    } else if (MATCH(NULL, "--temp")) {
        if (r > 0 && opt_float("--temp", v, 0, 100, &o->sp.temp))
            return -1;
    } else if (MATCH(NULL, "--top-k")) {
        if (r > 0 && opt_int("--top-k", v, 0, 1 << 24, &o->sp.top_k))
            return -1;
    } else if (MATCH(NULL, "--top-p")) {
        if (r > 0 && opt_float("--top-p", v, 0, 1, &o->sp.top_p))
            return -1;
        if (r > 0 && o->sp.top_p <= 0)
            return err_set("--top-p: must be above 0, got '%s'", v);
    } else if (MATCH(NULL, "--repeat-penalty")) {
        if (r > 0 && opt_float("--repeat-penalty", v, 0.01, 100, &o->sp.repeat_penalty))
            return -1;
    } else if (MATCH("-s", "--seed")) {
        if (r > 0) {
            if (opt_u64("--seed", v, &u))
                return -1;
            o->sp.seed = u;
        }
    } else {
        return cache_opt(o, argc, argv, i);
    }
#undef MATCH
    return r < 0 ? -1 : 1;
}

int draft_opts_parse(draft_opts *o, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
    if ((r = opt_match(argc, argv, i, NULL, "--draft", &v)) != 0) {
        if (r > 0 && draft_parse(v, o))
            return -1;
        /* as a session records it: it resumes and verifies from any folder (kept for the run) */
        static char *abs;
        char *now = r > 0 && o->kind == DRAFT_MODEL ? realpath(v, NULL) : NULL;
        if (now) {
            free(abs);
            o->dir = abs = now;
        }
    } else if ((r = opt_match(argc, argv, i, NULL, "--draft-max", &v)) != 0) {
        if (r > 0 && opt_int("--draft-max", v, 1, DRAFT_MAX_TOKENS, &o->max))
            return -1;
    } else if ((r = opt_match(argc, argv, i, NULL, "--draft-p-min", &v)) != 0) {
        if (r > 0 && opt_float("--draft-p-min", v, 0, 1, &o->min_prob))
            return -1;
    }
    return r < 0 ? -1 : r;
}

int model_opts_parse_all(model_opts *o, int argc, char **argv, const char *cmd)
{
    for (int i = 1; i < argc; i++) {
        int r = model_opts_parse(o, argc, argv, &i);
        if (r < 0)
            return -1;
        if (r == 0)
            return err_set("unknown option '%s' (see kvchat %s --help)", argv[i], cmd);
    }
    return 0;
}

int opt_set_sampling(char *key, const char *val, model_opts *mo)
{
    static const char *const names = "n, temp, top-k, top-p, repeat-penalty, seed";
    unsigned long long u;
    for (char *c = key; *c; c++) /* top-k as the status bar and the flags spell it, or top_k */
        *c = *c == '_' ? '-' : *c;
    if (!strcmp(key, "n"))
        return opt_int("n", val, 1, 1 << 20, &mo->n_predict);
    if (!strcmp(key, "temp"))
        return opt_float("temp", val, 0, 100, &mo->sp.temp);
    if (!strcmp(key, "top-k"))
        return opt_int("top-k", val, 0, 1 << 24, &mo->sp.top_k);
    if (!strcmp(key, "top-p"))
        return opt_float("top-p", val, 0.001, 1, &mo->sp.top_p);
    if (!strcmp(key, "repeat-penalty"))
        return opt_float("repeat-penalty", val, 0.01, 100, &mo->sp.repeat_penalty);
    if (strcmp(key, "seed"))
        return err_set("unknown setting '%s' (%s)", key, names);
    if (opt_u64("seed", val, &u))
        return -1;
    mo->sp.seed = u;
    return 0;
}
