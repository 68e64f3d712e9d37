#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../files.h"

static dtype default_dtype(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") ? DT_BF16 : DT_F32;
}

void model_opts_init(model_opts *o)
{
    memset(o, 0, sizeof *o);
    const char *dev = getenv("KVCHAT_DEVICE");
    o->device = dev && *dev ? dev : "auto";
    o->wtype = default_dtype();
    o->n_predict = 64;
    o->sp = sampler_defaults();
    kv_opts_default(&o->kv, NULL); /* the window: the model's context, once it is loaded */
}

int model_cache_dir(char *buf, size_t n, const char *name)
{
    char rel[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    return xdg_path(buf, n, "XDG_CACHE_HOME", ".cache", rel, "pass -m DIR");
}

const char *resolve_model_dir(const model_opts *o, char *buf, size_t n)
{
    const char *env = getenv("KVCHAT_MODEL");
    if (o->model_dir)
        snprintf(buf, n, "%s", o->model_dir);
    else if (env && *env)
        snprintf(buf, n, "%s", env);
    else if (model_cache_dir(buf, n, "gpt2"))
        return NULL;
    return buf;
}

typedef struct {
    double t0;
    int shown;
} load_bar;

/* a bar on stderr, for loads that take long enough to wonder about (large models, conversions) */
static void show_progress(void *ctx, const char *stage, double fraction)
{
    load_bar *b = ctx;
    if (!isatty(STDERR_FILENO) || (!b->shown && ev_clock() - b->t0 < 0.3))
        return;
    enum { W = 30 };
    int k = (int)(fraction * W + 0.5);
    fprintf(stderr, "\r%-30s [%.*s%*s] %3.0f%%", stage, k, "##############################", W - k,
            "", fraction * 100);
    fflush(stderr);
    b->shown = 1;
}

int load_model(loaded_model *lm, const model_opts *o)
{
    memset(lm, 0, sizeof *lm);
    if (!resolve_model_dir(o, lm->dir, sizeof lm->dir))
        return -1;
    struct stat sb;
    char cfg[4200];
    if (stat(lm->dir, &sb) || !S_ISDIR(sb.st_mode))
        return err_set("model directory %s %s; download GPT-2 with `kvchat get-model gpt2`, pass "
                       "-m DIR, or try "
                       "the offline demo: make demo",
                       lm->dir, stat(lm->dir, &sb) ? "does not exist" : "is not a directory");
    snprintf(cfg, sizeof cfg, "%s/config.json", lm->dir);
    if (stat(cfg, &sb))
        return err_set("%s has no config.json: not a Hugging Face model directory (`kvchat "
                       "get-model NAME` downloads "
                       "one, `kvchat make-tiny-model DIR` makes a test one)",
                       lm->dir);
    if (!(lm->backend = kb_create(o->device, o->threads)))
        return -1;
    /* said where it matters (info, /show) and here only when asked: not on every command */
    static int said;
    if (kb_fallback_reason() && o->verbose && !said++)
        fprintf(stderr, "kvchat: no usable GPU (%s); running on the CPU\n", kb_fallback_reason());
    use_kernels(lm, o->kernels);
    /* weights in bf16 on a GPU unless asked otherwise; on the CPU, what it computes fastest */
    dtype wt = o->wtype_set ? o->wtype : lm->backend->device_memory ? DT_BF16 : o->wtype;
    load_bar bar = {ev_clock(), 0};
    gpt2_progress pr = {show_progress, &bar};
    int rc = !(lm->tok = tok_load_dir(lm->dir)) || gpt2_load(&lm->model, lm->dir, wt, &pr) ||
             gpt2_place(&lm->model, lm->backend, &pr);
    if (bar.shown)
        fputs("\r\033[K", stderr);
    if (rc) {
        unload_model(lm);
        return -1;
    }
    if (tok_vocab_size(lm->tok) > lm->model.cfg.vocab_size) {
        err_set("%s: vocab.json has %d tokens but config.json's vocab_size is %d", lm->dir,
                tok_vocab_size(lm->tok), lm->model.cfg.vocab_size);
        unload_model(lm);
        return -1;
    }
    kv_opts kv = o->kv;
    if (!o->kv_type_set) /* half the cache bytes read per token, except on the exact f32 path of the
                            CPU */
        kv.type = lm->backend->device_memory ? DT_BF16 : wt == DT_F32 ? DT_F32 : DT_F16;
    if (!kv.window)
        kv.window = lm->model.cfg.n_ctx;
    if (!(lm->bus = ev_bus_create()) ||
        !(lm->pool = kv_pool_create(lm->backend, &lm->model.cfg, &kv, lm->bus))) {
        unload_model(lm);
        return -1;
    }
    return 0;
}

void use_kernels(loaded_model *lm, kb_kernels k)
{
    if (lm->backend->use_kernels)
        lm->backend->use_kernels(lm->backend, k);
    lm->kernels = k;
}

const char *kernels_name(kb_kernels k) { return k == KB_KERNELS_BASIC ? "basic" : "fast"; }

void unload_model(loaded_model *lm)
{
    kv_pool_free(lm->pool);
    ev_bus_free(lm->bus);
    gpt2_free(&lm->model);
    tok_free(lm->tok);
    if (lm->backend)
        lm->backend->destroy(lm->backend);
    memset(lm, 0, sizeof *lm);
}
