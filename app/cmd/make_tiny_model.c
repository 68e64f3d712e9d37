/* kvchat make-tiny-model: a deterministic random-weight GPT-2 in the exact Hugging Face layout,
 * with the real tokenizer files, for tests, benchmarks and the offline demo. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/config.h"
#include "../../model/safetensors.h"
#include "commands.h"
#include "../files.h"
#include "../options.h"

const char MAKE_TINY_MODEL_HELP[] =
    "usage: kvchat make-tiny-model DIR [options]\n"
    "\n"
    "Writes config.json, model.safetensors, vocab.json and merges.txt to DIR: a GPT-2 with\n"
    "random weights (its text is noise) in the real Hugging Face layout.\n"
    "\n"
    "  --layers L   (default 2)     --heads H   (default 2)     --embd E   (default 64)\n"
    "  --ctx C      (default 128)   --seed S    (default 1)     --dtype f32|f16|bf16 (default "
    "f32)\n"
    "  --vocab V    (257..50257, default 50257) a smaller vocabulary: GPT-2's first V ids, the\n"
    "               last its end of text (for tests that need few)\n"
    "  --prefix     name tensors 'transformer.*', as some exports do\n"
    "  --no-mask    leave out the h.N.attn.bias causal-mask buffers\n"
    "The 124M shape: --layers 12 --heads 12 --embd 768 --ctx 1024\n";

/* how each tensor is initialised: mean and standard deviation, or the causal mask */
typedef struct {
    float mean, std;
    int mask;
} init;

typedef struct {
    const gpt2_config *cfg;
    dtype type;
    uint64_t seed;
    const st_entry *e;
    const init *how;
    int n;
    size_t total, done; /* bytes, for the progress line of large models */
} tiny;

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Counter-based normal deviates: element k of tensor i is the same whatever the thread count. */
static float gauss(uint64_t seed, int tensor, size_t k)
{
    uint64_t a =
        mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)tensor * 0x632be59bd9b4e019ull + k * 2 + 1);
    uint64_t b = mix(a + 0x9e3779b97f4a7c15ull);
    double u1 = (double)((a >> 11) + 1) * 0x1.0p-53, u2 = (double)(b >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static int fill(int i, void *buf, void *ctx)
{
    tiny *t = ctx;
    t->done += t->e[i].bytes;
    if (t->total > (256u << 20) && isatty(STDERR_FILENO))
        fprintf(stderr, "\rwriting model.safetensors: %3d%%%s", (int)(100 * t->done / t->total),
                i == t->n - 1 ? "\n" : "");
    const init *h = &t->how[i];
    if (h->mask) { /* lower-triangular float32, as transformers saves attn.bias */
        int n = t->cfg->n_ctx;
        float *m = buf;
        for (int r = 0; r < n; r++)
            for (int q = 0; q < n; q++)
                m[(size_t)r * n + q] = q <= r ? 1.0f : 0.0f;
        return 0;
    }
    size_t n = t->e[i].bytes / dt_size(t->type);
    enum { CHUNK = 4096 };
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < n; c += CHUNK) {
        float tmp[CHUNK];
        size_t m = n - c < CHUNK ? n - c : CHUNK;
        for (size_t k = 0; k < m; k++)
            tmp[k] = h->mean + h->std * gauss(t->seed, i, c + k);
        dt_from_f32((char *)buf + c * dt_size(t->type), tmp, t->type, m);
    }
    return 0;
}

/* vocab.json and merges.txt of GPT-2's first V ids (its ids 256 on are its merges' results, in
 * order): the shipped files for all of them, else ids 0..V-2 with the merges that make them and
 * <|endoftext|> as id V-1, so that the checkpoint loads as config.json says */
static int write_tokenizer(const char *dir, int V)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if (V == 50257) {
        for (int i = 0; i < 2; i++) {
            const char *name = i ? "merges.txt" : "vocab.json";
            snprintf(dst, sizeof dst, "%s/%s", dir, name);
            if (copy_asset(name, dst))
                return -1;
        }
        return 0;
    }
    snprintf(src, sizeof src, "%s/vocab.json", assets_dir());
    json_error_t je;
    json_t *all = json_load_file(src, 0, &je), *some = json_object();
    const char *tok;
    json_t *id;
    int rc = !all || !some ? err_set("%s: %s", src, all ? "out of memory" : je.text) : 0;
    json_object_foreach(all, tok, id)
    {
        if (!rc && json_integer_value(id) < V - 1 && json_object_set(some, tok, id))
            rc = err_set("out of memory");
    }
    if (!rc && json_object_set_new(some, "<|endoftext|>", json_integer(V - 1)))
        rc = err_set("out of memory");
    snprintf(dst, sizeof dst, "%s/vocab.json", dir);
    if (!rc && json_dump_file(some, dst, JSON_COMPACT))
        rc = err_set("%s: cannot write it", dst);
    json_decref(all);
    json_decref(some);
    snprintf(src, sizeof src, "%s/merges.txt", assets_dir());
    snprintf(dst, sizeof dst, "%s/merges.txt", dir);
    FILE *in = rc ? NULL : fopen(src, "r"), *out = in ? fopen(dst, "w") : NULL;
    char line[512];
    /* the version line, then one merge for each id from 256 up to V - 2 */
    for (int n = 0; out && n < V - 256 && fgets(line, sizeof line, in);)
        n += fputs(line, out) >= 0;
    if (!rc && (!in || !out || ferror(in)))
        rc = err_set("%s: %s", !in ? src : dst, strerror(errno));
    if (out && fclose(out) && !rc)
        rc = err_set("%s: cannot write it", dst);
    if (in)
        fclose(in);
    return rc;
}

static int write_model(const char *dir, const gpt2_config *c, dtype type, uint64_t seed, int prefix,
                       int mask)
{
    int per_layer = 12 + (mask ? 1 : 0), n = 4 + c->n_layer * per_layer, k = 0;
    st_entry *e = calloc((size_t)n, sizeof *e);
    init *how = calloc((size_t)n, sizeof *how);
    char(*names)[96] = calloc((size_t)n, sizeof *names);
    if (!e || !how || !names) {
        free(e);
        free(how);
        free(names);
        return err_set("out of memory");
    }
    const char *pre = prefix ? "transformer." : "";
    const char *dt = type == DT_F32 ? "F32" : type == DT_F16 ? "F16" : "BF16";
    int64_t C = c->n_embd;
#define ADD(std_, mean_, r, cols, ...)                                            \
    do {                                                                          \
        snprintf(names[k], sizeof names[k], __VA_ARGS__);                         \
        e[k] = (st_entry){.name = names[k],                                       \
                          .dtype = dt,                                            \
                          .ndim = (r) != 0 ? 2 : 1,                               \
                          .shape = {(r) != 0 ? (r) : (cols), (cols)}};            \
        e[k].bytes = (size_t)((r) != 0 ? (r) : 1) * (size_t)(cols)*dt_size(type); \
        how[k] = (init){.mean = (mean_), .std = (std_)};                          \
        k++;                                                                      \
    } while (0)
    /* Unit-gain initialisation (std 1/sqrt(fan_in)) rather than GPT-2's 0.02: every layer then
     * moves the residual stream, so the random model's outputs depend on the whole context and its
     * logits are far from flat, which makes tests against the reference meaningful. */
    float s1 = 1.0f / sqrtf((float)C), s4 = 1.0f / sqrtf(4.0f * (float)C);
    ADD(0.3f, 0, c->vocab_size, C, "%swte.weight", pre);
    ADD(0.3f, 0, c->n_ctx, C, "%swpe.weight", pre);
    for (int l = 0; l < c->n_layer; l++) {
        ADD(0.1f, 1, 0, C, "%sh.%d.ln_1.weight", pre, l);
        ADD(0.02f, 0, 0, C, "%sh.%d.ln_1.bias", pre, l);
        if (mask) {
            snprintf(names[k], sizeof names[k], "%sh.%d.attn.bias", pre, l);
            e[k] = (st_entry){.name = names[k],
                              .dtype = "F32",
                              .ndim = 4,
                              .shape = {1, 1, c->n_ctx, c->n_ctx},
                              .bytes = (size_t)c->n_ctx * c->n_ctx * 4};
            how[k++] = (init){.mask = 1};
        }
        ADD(s1, 0, C, 3 * C, "%sh.%d.attn.c_attn.weight", pre, l);
        ADD(0.02f, 0, 0, 3 * C, "%sh.%d.attn.c_attn.bias", pre, l);
        ADD(s1, 0, C, C, "%sh.%d.attn.c_proj.weight", pre, l);
        ADD(0.02f, 0, 0, C, "%sh.%d.attn.c_proj.bias", pre, l);
        ADD(0.1f, 1, 0, C, "%sh.%d.ln_2.weight", pre, l);
        ADD(0.02f, 0, 0, C, "%sh.%d.ln_2.bias", pre, l);
        ADD(s1, 0, C, 4 * C, "%sh.%d.mlp.c_fc.weight", pre, l);
        ADD(0.02f, 0, 0, 4 * C, "%sh.%d.mlp.c_fc.bias", pre, l);
        ADD(s4, 0, 4 * C, C, "%sh.%d.mlp.c_proj.weight", pre, l);
        ADD(0.02f, 0, 0, C, "%sh.%d.mlp.c_proj.bias", pre, l);
    }
    ADD(0.1f, 1, 0, C, "%sln_f.weight", pre);
    ADD(0.02f, 0, 0, C, "%sln_f.bias", pre);
#undef ADD
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tiny t = {.cfg = c, .type = type, .seed = seed, .e = e, .how = how, .n = k};
    for (int i = 0; i < k; i++)
        t.total += e[i].bytes;
    part_file out;
    int rc = part_open(&out, path);
    if (!rc)
        rc = part_commit(&out, !st_write(out.f, path, e, k, fill, &t));
    free(e);
    free(how);
    free(names);
    return rc;
}

int tiny_model_write(const char *dir, const gpt2_config *c, dtype type, uint64_t seed)
{
    char path[PATH_MAX];
    if (make_dirs(dir) || write_tokenizer(dir, c->vocab_size))
        return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    return cfg_save(c, path) || write_model(dir, c, type, seed, 0, 1) ? -1 : 0;
}

int cmd_make_tiny_model(int argc, char **argv)
{
    gpt2_config c = {.n_layer = 2,
                     .n_head = 2,
                     .n_embd = 64,
                     .n_ctx = 128,
                     .vocab_size = 50257,
                     .ln_eps = 1e-5f,
                     .eos_id = 50256,
                     .random_weights = 1};
    dtype type = DT_F32;
    unsigned long long seed = 1;
    int prefix = 0, mask = 1;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
#define INTOPT(name, field, lo, hi)                             \
    if ((r = opt_match(argc, argv, &i, NULL, name, &v)) != 0) { \
        if (r < 0 || opt_int(name, v, lo, hi, &field))          \
            return EXIT_USAGE;                                  \
        continue;                                               \
    }
        INTOPT("--layers", c.n_layer, 1, 1024)
        INTOPT("--heads", c.n_head, 1, 4096)
        INTOPT("--embd", c.n_embd, 1, 65536)
        INTOPT("--ctx", c.n_ctx, 1, 65536)
        INTOPT("--vocab", c.vocab_size, 257, 50257)
#undef INTOPT
        if ((r = opt_match(argc, argv, &i, NULL, "--seed", &v)) != 0) {
            if (r < 0 || opt_u64("--seed", v, &seed))
                return EXIT_USAGE;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--dtype", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            if (dt_parse(v, &type) || type == DT_I8 || type == DT_Q8)
                return err_set("--dtype: expected f32, f16 or bf16, got '%s'", v), EXIT_USAGE;
        } else if (opt_match(argc, argv, &i, NULL, "--prefix", NULL)) {
            prefix = 1;
        } else if (opt_match(argc, argv, &i, NULL, "--no-mask", NULL)) {
            mask = 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return err_set("unknown option '%s' (see kvchat make-tiny-model --help)", argv[i]),
                   EXIT_USAGE;
        } else if (dir) {
            return err_set("one output directory, please (got '%s' and '%s')", dir, argv[i]),
                   EXIT_USAGE;
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        return err_set("missing the output directory (see kvchat make-tiny-model --help)"),
               EXIT_USAGE;
    c.eos_id = c.vocab_size - 1; /* GPT-2's: the last id */
    if (cfg_validate(&c))
        return EXIT_USAGE;
    if (make_dirs(dir))
        return EXIT_RUNTIME;
    char path[PATH_MAX];
    if (write_tokenizer(dir, c.vocab_size))
        return EXIT_RUNTIME;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (cfg_save(&c, path) || write_model(dir, &c, type, seed, prefix, mask))
        return EXIT_RUNTIME;
    return 0;
}
