/* kvchat perplexity: how well a model predicts a text, the instrument llama-perplexity is to
 * llama.cpp's users. Windows of --ctx tokens, --stride apart, each scoring its last --stride
 * tokens; the loss by position within the window (does the model use its context?); the attention
 * mass on position 0 (the sink); and, against a base run saved with --save-logits (another weight
 * or cache type), the KL divergence, its 99th percentile, top-1 agreement and the change in PPL. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "../../kernels/dtype.h"
#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../files.h"
#include "../options.h"
#include "../safe_text.h"
#include "../selftest.h"
#include "commands.h"
#include "copying.h"
#include "logits_file.h"

const char PERPLEXITY_HELP[] =
    "usage: kvchat perplexity [-m DIR] FILE [options]\n"
    "\n"
    "The perplexity of FILE's text under the model: windows of --ctx tokens, --stride apart, each\n"
    "scoring its last --stride tokens, so every scored token has ctx - stride tokens of context "
    "or\n"
    "more (llama-perplexity's rule at its default stride, half the window). Also the loss by\n"
    "position in the window and the attention mass on position 0 (the sink).\n"
    "\n"
    "usage: kvchat perplexity [-m DIR] FILE --repeat [options]\n"
    "       kvchat perplexity [-m DIR] --recall CHATS [options]\n"
    "\n"
    "Whether the model copies from far back: --repeat reads passages of FILE's text again after\n"
    "the 150-300 tokens that follow them, and gives the drop in loss at the second reading;\n"
    "--recall answers chats that state a fact first and ask for it later (tests/train/corpus.py's\n"
    "heldout-recall.jsonl), with the fact and with it never said. Each with its 95% interval and\n"
    "its gate (assets/models/README.md).\n"
    "\n"
    "      --stride N             tokens between windows, all of them scored (default: ctx/2)\n"
    "      --positions            every position of each window scored (windows side by side,\n"
    "                             or --stride apart): the loss by position says whether the\n"
    "                             model uses its context; with a --stride of ctx/8 or less each\n"
    "                             position bucket holds much the same text (content-balanced)\n"
    "      --tokens N             score at most N tokens (default: the whole text); with\n"
    "                             --repeat, read at most N tokens of the text\n"
    "      --save-logits FILE     the scored tokens' log-probabilities (f16, the vocabulary's\n"
    "                             each: 100 KB a token for GPT-2) and losses, for\n"
    "                             --kl-divergence\n"
    "      --kl-divergence FILE   against a base run's --save-logits on the same text: mean KL,\n"
    "                             its 99th percentile, top-1 agreement and the change in PPL\n"
    "                             (the f16 file sets a floor: a run against its own base\n"
    "                             shows it, about 1e-6 for GPT-2)\n"
    "      --json FILE            the per-token figures (position, id, loss; KL and top-1)\n"
    "      --force                write --save-logits and --json over an existing file that\n"
    "                             is no earlier output of theirs (never over an input)\n"
    "      --repeat               passages read twice: the drop in loss at the second reading\n"
    "      --recall CHATS         recall chats (JSON lines): the fill's top-1 accuracy with the\n"
    "                             fact in the window and without it\n"
    "  -q, --quiet                no progress bar\n"
    "\n" MODEL_OPTS_HELP CACHE_OPTS_HELP;

typedef struct {
    model_opts mo;
    const char *file, *save, *base, *json, *recall;
    int stride, positions, quiet, repeat, force;
    long max_tokens;
} ppl_args;

/* what a run adds up */
typedef struct {
    double nll, kl, sink, sink_uniform;
    long scored, top1, sink_steps;
    double *pos_nll; /* by position in the window */
    long *pos_n;
    float *kls; /* each scored token's, for the percentile */
    double base_nll;
} ppl_sums;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int parse_args(ppl_args *a, int argc, char **argv)
{
    model_opts_init(&a->mo);
    a->max_tokens = -1;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = model_opts_parse(&a->mo, argc, argv, &i)) != 0) {
            if (r < 0)
                return -1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--stride", &v)) != 0) {
            if (r < 0 || opt_int("--stride", v, 1, 1 << 20, &a->stride))
                return -1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--tokens", &v)) != 0) {
            int n;
            if (r < 0 || opt_int("--tokens", v, 1, INT32_MAX, &n))
                return -1;
            a->max_tokens = n;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--save-logits", &v)) != 0) {
            if (r < 0)
                return -1;
            a->save = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--kl-divergence", &v)) != 0) {
            if (r < 0)
                return -1;
            a->base = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--json", &v)) != 0) {
            if (r < 0)
                return -1;
            a->json = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--recall", &v)) != 0) {
            if (r < 0)
                return -1;
            a->recall = v;
        } else if (opt_match(argc, argv, &i, NULL, "--force", NULL)) {
            a->force = 1;
        } else if (opt_match(argc, argv, &i, NULL, "--repeat", NULL)) {
            a->repeat = 1;
        } else if (opt_match(argc, argv, &i, NULL, "--positions", NULL)) {
            a->positions = 1;
        } else if (opt_match(argc, argv, &i, "-q", "--quiet", NULL)) {
            a->quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return err_set("unknown option '%s' (see kvchat perplexity --help)", argv[i]);
        } else if (a->file) {
            return err_set("one text at a time: '%s' and '%s'", a->file, argv[i]);
        } else {
            a->file = argv[i];
        }
    }
    if (a->recall && (a->file || a->repeat))
        return err_set("--recall measures its chats: no text or --repeat with it");
    if (!a->file && !a->recall)
        return err_set("no text to measure (kvchat perplexity -m DIR FILE)");
    if ((a->repeat || a->recall) && (a->positions || a->stride || a->save || a->base || a->json))
        return err_set("%s: no --positions, --stride, --save-logits, --kl-divergence or --json "
                       "with it",
                       a->repeat ? "--repeat" : "--recall");
    if (a->save && a->base)
        return err_set("--save-logits writes a base run; --kl-divergence compares with one: not "
                       "both");
    return 0;
}

/* log-softmax of logits into lp (V floats); returns the top id */
static int log_softmax(const float *logits, int V, float *lp)
{
    int top = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[top])
            top = v;
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp((double)logits[v] - logits[top]);
    double lse = logits[top] + log(sum);
    for (int v = 0; v < V; v++)
        lp[v] = (float)(logits[v] - lse);
    return top;
}

/* a number for JSON: JSON has no NaN or infinity, so those are null */
static const char *num(char buf[32], double v)
{
    snprintf(buf, 32, isfinite(v) ? "%.10g" : "null", v);
    return buf;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The progress line (a terminal's stderr, not --quiet): drawn before the first window is done
 * (that took half a minute on a loaded machine), then at most ten times a second as tokens are
 * scored; cut to the terminal's width and cleared to its end, so it never wraps into lines that
 * stay behind. */
static struct {
    int on;
    long total;
    double last;
} bar;

static void progress(const ppl_sums *s, int now_anyway)
{
    double t = ev_clock();
    if (!bar.on || (!now_anyway && t - bar.last < 0.1))
        return;
    bar.last = t;
    struct winsize ws;
    int cols = !ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) && ws.ws_col > 1 ? ws.ws_col : 80;
    int width = 30, fill = bar.total ? (int)(width * s->scored / bar.total) : width;
    char line[256], ppl[32] = "-";
    if (s->scored)
        snprintf(ppl, sizeof ppl, "%.2f", exp(s->nll / s->scored));
    snprintf(line, sizeof line, "perplexity [%.*s%*s] %ld/%ld tok  PPL %s", fill,
             "##############################", width - fill, "", s->scored, bar.total, ppl);
    if (cols - 1 < (int)sizeof line)
        line[cols - 1] = 0;
    fprintf(stderr, "\r\033[K%s", line);
}

/* One window: its first `first` tokens in one pass, then a token a step, each scored from the
 * logits before it. The sink: the mass each step's query gives position 0, with the share a
 * uniform reading would give, beside it. */
static int window(loaded_model *lm, const int *w, int len, int first, long offset, ppl_sums *s,
                  const ppl_args *a, base_run *base, FILE *save, FILE *json, float *buf)
{
    gpt2_model *m = &lm->model;
    int V = m->cfg.vocab_size, L = m->cfg.n_layer, H = m->cfg.n_head, rc = 0;
    float *logits = buf, *lp = buf + V, *blp = buf + 2 * V, *mass = buf + 3 * V;
    int spans[3] = {0, 1, 1 << 30};
    kb_probe probe = {.start = spans, .n_spans = 2, .mass = mass};
    uint16_t *row = (uint16_t *)(mass + L * H * 2);
    kv_seq *cache = kv_seq_new(lm->pool, 0);
    if (!cache)
        return err_wrap("a window's cache");
    rc = gpt2_forward(m, lm->backend, cache, w, first, logits);
    for (int j = first; !rc && j < len && !interrupted; j++) {
        if (a->max_tokens >= 0 && s->scored >= a->max_tokens)
            break;
        int top = log_softmax(logits, V, lp), id = w[j], same = 0;
        double nll = -lp[id], kl = 0;
        s->nll += nll;
        s->pos_nll[j] += nll;
        s->pos_n[j]++;
        if (base) {
            float bnll;
            int32_t btop;
            double lse = 0;
            if ((rc = base_next(base, id, blp, &lse, &btop, &bnll, a->base)))
                break;
            for (int v = 0; v < V; v++) {
                double b = blp[v] - lse;
                kl += exp(b) * (b - lp[v]);
            }
            kl = kl < 0 ? 0 : kl; /* the f16 base's rounding, never a real gain */
            same = btop == top;
            s->kl += kl;
            s->kls[s->scored] = (float)kl;
            s->top1 += same;
            s->base_nll += bnll;
        }
        if (save && save_row(save, id, top, lp, V, row)) {
            rc = err_set("%s: cannot write it: %s", a->save, strerror(errno));
            break;
        }
        if (json) {
            char x[32], y[32];
            fprintf(json, "%s\n  {\"at\": %ld, \"pos\": %d, \"id\": %d, \"nll\": %s",
                    s->scored ? "," : "", offset + j, j, id, num(x, nll));
            if (base)
                fprintf(json, ", \"kl\": %s, \"top1\": %s", num(y, kl), same ? "true" : "false");
            fputc('}', json);
        }
        s->scored++;
        progress(s, 0);
        if (j + 1 == len)
            break;
        m->probe = &probe;
        rc = gpt2_forward(m, lm->backend, cache, &w[j], 1, logits);
        m->probe = NULL;
        if (!rc && j >= 1) {
            double sink = 0;
            for (int k = 0; k < L * H; k++)
                sink += mass[k * 2];
            s->sink += sink / (L * H);
            s->sink_uniform += 1.0 / (j + 1);
            s->sink_steps++;
        }
    }
    kv_seq_free(cache);
    return rc;
}

/* the loss by position: buckets doubling in width, and the context gate's two (0-31, 200-255) */
static double bucket(const ppl_sums *s, int from, int to, long *n)
{
    double sum = 0;
    *n = 0;
    for (int j = from; j <= to; j++)
        sum += s->pos_nll[j], *n += s->pos_n[j];
    return *n ? sum / *n : NAN;
}

static void report(const ppl_sums *s, const ppl_args *a, int ctx, FILE *json)
{
    double ppl = exp(s->nll / s->scored);
    printf("tokens scored: %ld\nperplexity: %.3f  (mean loss %.4f nats)\n", s->scored, ppl,
           s->nll / s->scored);
    printf("loss by position in the window:");
    for (int from = 0, to = 31; from < ctx; from = to + 1, to = 2 * to + 1) {
        long n;
        double l = bucket(s, from, to < ctx ? to : ctx - 1, &n);
        if (n)
            printf("  %d-%d %.3f", from, to < ctx ? to : ctx - 1, l);
    }
    printf("\n");
    long n0, n1;
    double early = ctx > 31 ? bucket(s, 0, 31, &n0) : NAN,
           late = ctx > 255 ? bucket(s, 200, 255, &n1) : NAN;
    if (!isnan(early) && !isnan(late) && n0 && n1)
        printf("context: loss at positions 200-255 is %.3f nats below 0-31\n", early - late);
    if (s->sink_steps)
        printf("attention on position 0 (the sink): %.1f%% of the mass, mean over layers, heads "
               "and steps (a uniform reading: %.1f%%)\n",
               100 * s->sink / s->sink_steps, 100 * s->sink_uniform / s->sink_steps);
    double kl_p99 = 0, base_ppl = 0;
    if (a->base) {
        qsort(s->kls, (size_t)s->scored, sizeof *s->kls, cmp_float);
        kl_p99 = s->kls[(long)(0.99 * (s->scored - 1))];
        base_ppl = exp(s->base_nll / s->scored);
        char name[4200];
        printf("against %s: mean KL %.3g  99th percentile %.3g  top-1 agreement %.2f%%  "
               "PPL %.3f -> %.3f (%+.3f)\n",
               safe_copy(name, sizeof name, a->base), s->kl / s->scored, kl_p99,
               100.0 * s->top1 / s->scored, base_ppl, ppl, ppl - base_ppl);
    }
    if (json) {
        char x[4][32];
        fprintf(json, "\n ],\n \"scored\": %ld, \"perplexity\": %s, \"mean_nll\": %s", s->scored,
                num(x[0], ppl), num(x[1], s->nll / s->scored));
        if (s->sink_steps)
            fprintf(json, ", \"sink\": %s", num(x[0], s->sink / s->sink_steps));
        if (a->base)
            fprintf(json,
                    ", \"kl_mean\": %s, \"kl_p99\": %s, \"top1\": %.8f, \"base_perplexity\": %s",
                    num(x[0], s->kl / s->scored), num(x[1], kl_p99), (double)s->top1 / s->scored,
                    num(x[2], base_ppl));
        fprintf(json, "\n}\n");
    }
}

static int measure(loaded_model *lm, const ppl_args *a, const int *ids, int n)
{
    gpt2_model *m = &lm->model;
    int V = m->cfg.vocab_size, ctx = kv_pool_opts(lm->pool)->window;
    if (ctx < 2)
        return err_set("a window of %d position%s: perplexity needs 2 or more (--ctx)", ctx,
                       ctx == 1 ? "" : "s");
    int stride = a->stride ? a->stride : a->positions ? ctx : ctx / 2;
    int first = a->positions ? 1 : ctx - stride, rc = -1;
    if (stride > ctx || first < 1)
        return err_set("--stride %d: at most the window less one token (%d)", stride, ctx - 1);
    if (n <= first)
        return err_set("%s: %d tokens, too few for a window that scores after %d", a->file, n,
                       first);
    long total = 0; /* the tokens the windows score */
    for (long s0 = 0; s0 + first < n; s0 += stride)
        total += (s0 + ctx < n ? ctx : n - s0) - first;
    if (a->max_tokens >= 0 && total > a->max_tokens)
        total = a->max_tokens;
    ppl_sums s = {0};
    base_run base = {0};
    part_file save = {0}, json = {0};
    size_t floats = 3 * (size_t)V + 2 * (size_t)m->cfg.n_layer * m->cfg.n_head + V;
    float *buf = err_malloc(sizeof *buf * floats, "perplexity's buffers");
    s.pos_nll = err_calloc((size_t)ctx, sizeof *s.pos_nll, "the loss by position");
    s.pos_n = err_calloc((size_t)ctx, sizeof *s.pos_n, "the loss by position");
    s.kls = a->base ? err_malloc(sizeof *s.kls * (size_t)(total + 1), "the KL values") : NULL;
    if (!buf || !s.pos_nll || !s.pos_n || (a->base && !s.kls))
        goto out;
    if (a->base && base_open(&base, a->base, V))
        goto out;
    if (a->base && base.count != total) {
        err_set("%s: the base run scored %ld tokens, this one scores %ld (another text, --ctx, "
                "--stride or --tokens?)",
                a->base, base.count, total);
        goto out;
    }
    if (a->save) {
        if (part_open(&save, a->save) || save_head(save.f, V, total))
            goto out;
    }
    if (a->json && (part_open(&json, a->json) || fprintf(json.f, "%s", JSON_HEAD) < 0))
        goto out;
    bar.on = !a->quiet && isatty(STDERR_FILENO);
    bar.total = total;
    progress(&s, 1);
    signal(SIGINT, on_sigint); /* a stop leaves no part file behind */
    signal(SIGTERM, on_sigint);
    signal(SIGHUP, on_sigint);
    rc = 0;
    for (long s0 = 0; !rc && s0 + first < n && s.scored < total && !interrupted; s0 += stride) {
        int len = s0 + ctx < n ? ctx : (int)(n - s0);
        rc = window(lm, ids + s0, len, first, s0, &s, a, a->base ? &base : NULL, save.f, json.f,
                    buf);
        progress(&s, 1);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    if (bar.on)
        fputc('\n', stderr);
    if (!rc && interrupted)
        rc = err_set("interrupted after %ld of %ld tokens: nothing written", s.scored, total);
    if (!rc)
        report(&s, a, ctx, json.f);
out:
    if (save.f && part_commit(&save, !rc))
        rc = -1;
    if (json.f && part_commit(&json, !rc))
        rc = -1;
    base_close(&base);
    free(buf);
    free(s.pos_nll);
    free(s.pos_n);
    free(s.kls);
    return rc;
}

/* The outputs' paths, before anything is loaded or measured: never an input (the text, the base
 * run, the model's files), and an existing file only when it is an earlier output of its kind */
static int claim_outputs(const ppl_args *a)
{
    char dir[4096], files[5][4200];
    const char *names[5] = {"config.json", "model.safetensors", "pytorch_model.bin", "vocab.json",
                            "merges.txt"};
    const char *inputs[8] = {a->file ? a->file : "", a->base ? a->base : ""};
    const char *d = resolve_model_dir(&a->mo, dir, sizeof dir);
    for (int i = 0; i < 5; i++) {
        snprintf(files[i], sizeof files[i], "%s/%s", d ? d : ".", names[i]);
        inputs[2 + i] = files[i];
    }
    if (a->save && output_claim(a->save, "--save-logits", LOGITS_HEAD, inputs, a->force))
        return -1;
    if (a->json && output_claim(a->json, "--json", JSON_HEAD, inputs, a->force))
        return -1;
    if (a->save && a->json && same_file(a->save, a->json))
        return err_set("--save-logits and --json: one file for both");
    return 0;
}

int cmd_perplexity(int argc, char **argv)
{
    ppl_args a = {0};
    if (parse_args(&a, argc, argv))
        return EXIT_USAGE;
    if (claim_outputs(&a))
        return EXIT_RUNTIME;
    loaded_model lm;
    if (a.recall) {
        if (selftest_load(&lm, &a.mo))
            return EXIT_RUNTIME;
        int rc = copy_recall(&lm, a.recall, a.quiet || !isatty(STDERR_FILENO), NULL);
        unload_model(&lm);
        return rc ? EXIT_RUNTIME : 0;
    }
    size_t len = 0;
    FILE *f = fopen(a.file, "rb");
    char *text = f ? read_all(f, &len, a.file) : NULL;
    if (!f)
        err_set("%s: %s", a.file, strerror(errno));
    if (f)
        fclose(f);
    if (!text)
        return EXIT_RUNTIME;
    int *ids = NULL, n = 0, cap = 0, rc = EXIT_RUNTIME;
    if (selftest_load(&lm, &a.mo)) {
        free(text);
        return EXIT_RUNTIME;
    }
    if (!tok_encode(lm.tok, text, len, 0, &ids, &n, &cap)) {
        if (a.repeat && a.max_tokens >= 0 && n > a.max_tokens) /* the text --repeat reads */
            n = (int)a.max_tokens;
        int quiet = a.quiet || !isatty(STDERR_FILENO);
        if (a.repeat ? !copy_repeat(&lm, ids, n, -1, quiet, NULL) : !measure(&lm, &a, ids, n))
            rc = 0;
    }
    unload_model(&lm);
    free(text);
    free(ids);
    return rc;
}
