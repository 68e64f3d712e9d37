/* kvchat generate: continue a prompt, streaming the new text (or ids) to stdout as it is made. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "commands.h"
#include "../files.h"
#include "../options.h"
#include "../safe_text.h"
#include "../selftest.h"
#include "../../model/speculate.h"

const char GENERATE_HELP[] =
    "usage: kvchat generate [-m DIR] [-p TEXT | --prompt-ids 1,2,3] [options]\n"
    "\n"
    "Continues the prompt and streams the new text to stdout as it is generated.\n"
    "Stops at <|endoftext|>, after --max-tokens, or when the context is full.\n"
    "\n"
    "  -p, --prompt TEXT      the prompt (default: start from <|endoftext|>)\n"
    "      --prompt-ids LIST  the prompt as token ids, separated by commas or spaces\n"
    "      --special          treat \"<|endoftext|>\" in the prompt text as the special token\n"
    "      --output text|ids  print text (default) or the new token ids on one line\n"
    "      --dump-logits FILE write the vocab-size little-endian float32 logits from which the\n"
    "                         first new token was chosen (with --force-ids, then those after each\n"
    "                         forced id: one row per step)\n"
    "      --force-ids LIST   teacher forcing: feed these ids one per step after the prompt, in "
    "place\n"
    "                         of the chosen ones (as many steps as ids; for comparing backends)\n"
    "      --no-cache         recompute the whole prefix for every token (no KV cache)\n"
    "  -q, --quiet            no timing summary on stderr\n"
    "\n" MODEL_OPTS_HELP SAMPLING_OPTS_HELP DRAFT_OPTS_HELP CACHE_OPTS_HELP;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int parse_ids(const char *flag, const char *s, int **ids, int *n, int *cap)
{
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ')
            p++;
        if (!*p)
            break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > (1L << 24) || (*end && *end != ',' && *end != ' '))
            return err_set("%s: expected non-negative integers separated by commas, got '%s'", flag,
                           s);
        size_t c = (size_t)*cap;
        if (err_grow(ids, &c, (size_t)*n + 1, sizeof **ids, flag))
            return -1;
        *cap = (int)c;
        (*ids)[(*n)++] = (int)v;
        p = end;
    }
    return *n ? 0 : err_set("%s: no ids given", flag);
}

typedef struct {
    model_opts mo;
    const char *prompt, *prompt_ids, *dump_logits, *force_ids;
    int output_ids, no_cache, special, quiet;
    draft_opts draft;
} gen_args;

static int parse_args(gen_args *a, int argc, char **argv)
{
    model_opts_init(&a->mo);
    draft_opts_default(&a->draft);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = model_opts_parse(&a->mo, argc, argv, &i)) != 0 ||
            (r = draft_opts_parse(&a->draft, argc, argv, &i)) != 0) {
            if (r < 0)
                return -1;
        } else if ((r = opt_match(argc, argv, &i, "-p", "--prompt", &v)) != 0) {
            if (r < 0)
                return -1;
            a->prompt = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--prompt-ids", &v)) != 0) {
            if (r < 0)
                return -1;
            a->prompt_ids = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--dump-logits", &v)) != 0) {
            if (r < 0)
                return -1;
            a->dump_logits = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--force-ids", &v)) != 0) {
            if (r < 0)
                return -1;
            a->force_ids = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--output", &v)) != 0) {
            if (r < 0)
                return -1;
            if (strcmp(v, "text") && strcmp(v, "ids"))
                return err_set("--output: expected text or ids, got '%s'", v);
            a->output_ids = !strcmp(v, "ids");
        } else if (opt_match(argc, argv, &i, NULL, "--no-cache", NULL)) {
            a->no_cache = 1;
        } else if (opt_match(argc, argv, &i, NULL, "--special", NULL)) {
            a->special = 1;
        } else if (opt_match(argc, argv, &i, "-q", "--quiet", NULL)) {
            a->quiet = 1;
        } else {
            return err_set("unknown option '%s' (see kvchat generate --help)", argv[i]);
        }
    }
    if (a->prompt && a->prompt_ids)
        return err_set("give either --prompt or --prompt-ids, not both");
    if (a->draft.kind != DRAFT_NONE && a->force_ids)
        return err_set("--draft: not with --force-ids (teacher forcing chooses no tokens)");
    if (a->draft.kind != DRAFT_NONE && a->no_cache)
        return err_set("--draft: not with --no-cache (drafts are checked against the cache)");
    return 0;
}

/* force: the ids to feed after the prompt (teacher forcing), n_force of them, or NULL */
static int generate(loaded_model *lm, const gen_args *a, int *ids, int n_prompt, const int *force,
                    int n_force)
{
    gpt2_model *m = &lm->model;
    int V = m->cfg.vocab_size, n_ctx = kv_pool_opts(lm->pool)->window, eos = tok_eos(lm->tok),
        rc = -1;
    if (n_prompt > n_ctx)
        return err_set("prompt is %d tokens; the context holds %d", n_prompt, n_ctx);
    for (int i = 0; i < n_prompt; i++)
        if (ids[i] >= V)
            return err_set("prompt token id %d is outside the vocabulary (0..%d)", ids[i], V - 1);
    for (int i = 0; i < n_force; i++)
        if (force[i] >= V)
            return err_set("--force-ids: token id %d is outside the vocabulary (0..%d)", force[i],
                           V - 1);
    part_file dump = {0};
    if (a->dump_logits &&
        (dump_claim(a->dump_logits, 4ll * V, NULL) || part_open(&dump, a->dump_logits)))
        return err_wrap("--dump-logits");
    kv_seq *cache = kv_seq_new(lm->pool, 0);
    drafter *dr = NULL;
    spec *sp = NULL;
    float *logits = a->dump_logits ? err_malloc(sizeof(float) * V, "logits") : NULL;
    sampler smp;
    sampler_init(&smp, &a->mo.sp);
    tok_stream ts;
    tok_stream_init(&ts, lm->tok);
    if (!cache || (a->dump_logits && !logits))
        goto out;
    if (a->draft.kind != DRAFT_NONE &&
        (!(dr = draft_new(&a->draft, m, lm->dir, lm->backend, lm->pool, 0)) ||
         !(sp = spec_new(m, lm->backend, dr))))
        goto out;
    int raw = !isatty(STDOUT_FILENO), n = n_prompt, made = 0, next = -1;
    double t0 = ev_clock();
    kb_sample pick = sampler_draw(&smp, ids, n);
    if (gpt2_step(m, lm->backend, cache, ids, n_prompt, a->mo.n_predict > 0 ? &pick : NULL, &next,
                  logits))
        goto out;
    double t_prefill = ev_clock() - t0;
    /* x86-64 and arm64 are little-endian: the floats go out as they are */
    if (dump.f && fwrite(logits, sizeof(float), (size_t)V, dump.f) != (size_t)V)
        goto out;
    signal(SIGINT, on_sigint);
    t0 = ev_clock();
    while (made < a->mo.n_predict && !interrupted) {
        int id = force ? force[made] : next;
        if (id == eos && !force)
            break;
        ids[n++] = id;
        made++;
        size_t len;
        if (a->output_ids) {
            printf(made > 1 ? " %d" : "%d", id);
        } else {
            const char *text = tok_stream_push(&ts, id, &len);
            safe_fwrite(stdout, text, len, raw);
        }
        fflush(stdout);
        if (made == a->mo.n_predict && !force) /* forced: the last id is fed too, for its logits */
            break;
        if (n == n_ctx) {
            if (!a->quiet)
                fprintf(stderr, "\n[stopped: the context of %d tokens is full]\n", n_ctx);
            break;
        }
        if (sp) { /* a round gives what the context and -n leave room for */
            int left = a->mo.n_predict - made, room = n_ctx - n;
            if (spec_next(sp, cache, ids, n, &smp, left < room ? left : room, &next, NULL))
                goto out;
            continue;
        }
        pick = sampler_draw(&smp, ids, n);
        float *step_logits = force && dump.f ? logits : NULL;
        int fail =
            a->no_cache
                ? (kv_truncate(cache, 0) ||
                   gpt2_step(m, lm->backend, cache, ids, n, &pick, &next, step_logits))
                : gpt2_step(m, lm->backend, cache, ids + n - 1, 1, &pick, &next, step_logits);
        if (fail || (step_logits && fwrite(logits, sizeof(float), (size_t)V, dump.f) != (size_t)V))
            goto out;
    }
    double t_decode = ev_clock() - t0;
    if (!a->output_ids) {
        size_t len;
        const char *rest = tok_stream_flush(&ts, &len);
        safe_fwrite(stdout, rest, len, raw);
    }
    putchar('\n');
    fflush(stdout);
    if (!a->quiet)
        fprintf(stderr,
                "[prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens at %.1f tok/s%s]\n",
                n_prompt, t_prefill * 1e3, n_prompt / t_prefill, made,
                made > 0 ? made / t_decode : 0.0, a->no_cache ? ", no cache" : "");
    if (!a->quiet && sp) {
        const spec_stats *st = spec_get_stats(sp);
        char name[4200]; /* a directory's name may hold escape sequences */
        fprintf(stderr,
                "[draft %s: %ld drafted, %ld accepted (%.0f%%; %.0f%% of %ld tested), %.2f tokens "
                "a model pass over %ld passes]\n",
                safe_copy(name, sizeof name, draft_name(&a->draft)), st->drafted, st->accepted,
                st->drafted ? 100.0 * st->accepted / st->drafted : 0.0,
                st->tested ? 100.0 * st->accepted / st->tested : 0.0, st->tested,
                st->rounds ? (double)st->made / st->rounds : 0.0, st->rounds);
    }
    rc = interrupted ? 130 : 0;
out:
    if (dump.f && part_commit(&dump, rc == 0) && rc == 0)
        rc = err_wrap("--dump-logits");
    signal(SIGINT, SIG_DFL);
    tok_stream_free(&ts);
    free(logits);
    spec_free(sp);
    draft_free(dr);
    kv_seq_free(cache);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    gen_args a = {0};
    if (parse_args(&a, argc, argv))
        return EXIT_USAGE;
    int *ids = NULL, n = 0, cap = 0, rc = EXIT_USAGE, *force = NULL, n_force = 0, cap_force = 0;
    if (a.prompt_ids && parse_ids("--prompt-ids", a.prompt_ids, &ids, &n, &cap))
        goto out;
    if (a.force_ids && parse_ids("--force-ids", a.force_ids, &force, &n_force, &cap_force))
        goto out;
    if (force)
        a.mo.n_predict = n_force;
    loaded_model lm;
    rc = EXIT_RUNTIME;
    if (selftest_load(&lm, &a.mo))
        goto out;
    if (a.prompt && tok_encode(lm.tok, a.prompt, strlen(a.prompt), a.special, &ids, &n, &cap))
        goto unload;
    if (n == 0) { /* GPT-2's unconditional start */
        free(ids);
        ids = malloc(sizeof *ids);
        if (!ids) {
            err_set("out of memory");
            goto unload;
        }
        ids[n++] = tok_eos(lm.tok) >= 0 ? tok_eos(lm.tok) : lm.model.cfg.eos_id;
    }
    /* room for everything generated, without reallocating in the loop */
    size_t room = (size_t)cap; /* tok_encode's count, as err_grow takes it */
    if (err_grow(&ids, &room, (size_t)n + (size_t)a.mo.n_predict, sizeof *ids, "the generated ids"))
        goto unload;
    int g = generate(&lm, &a, ids, n, force, n_force);
    rc = g < 0 ? EXIT_RUNTIME : g;
unload:
    unload_model(&lm);
out:
    free(ids);
    free(force);
    return rc;
}
