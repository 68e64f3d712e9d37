/* kvchat chat --no-tui: one user message per line on stdin, each reply on one line of stdout, the
 * conversation (and its KV cache) kept across lines. The TUI runs the same engine. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/err.h"
#include "commands.h"
#include "engine.h"
#include "events_log.h"
#include "options.h"
#include "safe_text.h"
#include "tui.h"

#define CHAT_OPTS_HELP                                                                           \
    "      --template T       gpt2 (default) | dialogpt | none\n"                                \
    "      --keep K           tokens at the start never evicted (default: the template's preamble)\n" \
    "      --evict-min N      evict at least N tokens at a time (default: a quarter of --ctx)\n" \
    "      --evict M          exact (default: re-prefill what remains) | shift (approximate, what\n" \
    "                         llama.cpp does to GPT-2: old keys keep their old positions)\n"     \
    "      --fidelity N       every N tokens, recompute the logits from scratch and report top-1\n" \
    "                         agreement and KL divergence as a fidelity event\n"                 \
    "      --idle-offload S   move conversations idle S seconds to host memory\n"                \
    "      --events FILE      write every cache and chat event to FILE, one JSON object a line\n"

const char CHAT_HELP[] =
    "usage: kvchat [chat] [-m DIR] [options]               the full-screen chat\n"
    "       kvchat chat --no-tui [-m DIR] [options] < messages\n"
    "\n"
    "Chat with GPT-2 and watch its KV cache: the cache lives across turns (each turn processes only\n"
    "its new tokens); when the window fills, the oldest turns after the kept prefix are evicted and\n"
    "what remains is re-prefilled at its new positions, exactly. F1 in the chat lists keys and\n"
    "commands. Ctrl-C stops the reply being generated (what was generated stays).\n"
    "\n"
    "With --no-tui, or when stdin or stdout is not a terminal: reads one user message per line and\n"
    "writes each reply as one line (newlines inside it become spaces).\n"
    "\n"
    "      --no-tui           line mode\n"
    "\n" CHAT_OPTS_HELP "\n" MODEL_OPTS_HELP SAMPLING_OPTS_HELP CACHE_OPTS_HELP;

static engine *running_engine;
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
    if (running_engine)
        engine_cancel(running_engine);
}

static void print_text(void *ctx, int conv, const char *text, size_t len)
{
    (void)conv;
    int raw = *(int *)ctx;
    for (size_t i = 0; i < len; i++) {
        size_t j = i;
        while (j < len && text[j] != '\n' && text[j] != '\r')
            j++;
        safe_fwrite(stdout, text + i, j - i, raw);
        if (j < len)
            fputc(' ', stdout);
        i = j;
    }
    fflush(stdout);
}

static int chat_opts_parse(engine_opts *eo, const char **events, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
#define MATCH(l) ((r = opt_match(argc, argv, i, NULL, l, &v)) != 0)
    if (MATCH("--template")) {
        if (r > 0 && tpl_parse(v, &eo->tpl))
            return -1;
    } else if (MATCH("--keep")) {
        if (r > 0 && opt_int("--keep", v, 0, 65536, &eo->keep))
            return -1;
    } else if (MATCH("--evict-min")) {
        if (r > 0 && opt_int("--evict-min", v, 1, 65536, &eo->evict_min))
            return -1;
    } else if (MATCH("--evict")) {
        if (r > 0 && strcmp(v, "exact") && strcmp(v, "shift"))
            return err_set("--evict: expected exact or shift, got '%s'", v);
        if (r > 0)
            eo->evict = strcmp(v, "exact") ? EVICT_SHIFT : EVICT_EXACT;
    } else if (MATCH("--fidelity")) {
        if (r > 0 && opt_int("--fidelity", v, 0, 1 << 20, &eo->fidelity))
            return -1;
    } else if (MATCH("--idle-offload")) {
        float f;
        if (r > 0 && opt_float("--idle-offload", v, 0, 1e9, &f))
            return -1;
        if (r > 0)
            eo->idle_offload = f;
    } else if (MATCH("--events")) {
        if (r > 0)
            *events = v;
    } else {
        return 0;
    }
#undef MATCH
    return r < 0 ? -1 : 1;
}

int cmd_chat(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    engine_opts eo = {.tpl = TPL_GPT2, .keep = -1, .evict = EVICT_EXACT};
    const char *events = NULL;
    int no_tui = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if (opt_match(argc, argv, &i, NULL, "--no-tui", NULL))
            no_tui = 1;
        else if ((r = chat_opts_parse(&eo, &events, argc, argv, &i)) != 0 || (r = model_opts_parse(&mo, argc, argv, &i)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
        } else
            return err_set("unknown option '%s' (see kvchat chat --help)", argv[i]), EXIT_USAGE;
    }
    /* the TUI needs a terminal on both ends; pipes and files get the line mode */
    int tui = !no_tui && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    loaded_model lm;
    if (load_model(&lm, &mo))
        return EXIT_RUNTIME;
    events_log log = {0};
    engine *e = NULL;
    int rc = EXIT_RUNTIME, raw = !isatty(STDOUT_FILENO), conv;
    if ((events && events_log_open(&log, events, lm.bus)) || !(e = engine_create(&lm, &mo, &eo)) ||
        (conv = engine_new_conv(e)) < 0)
        goto out;
    if (tui) {
        rc = tui_run(&lm, e, &eo);
        goto out;
    }
    engine_on_text(e, print_text, &raw);
    running_engine = e;
    signal(SIGINT, on_sigint);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    rc = 0;
    while (!interrupted && (got = getline(&line, &cap, stdin)) >= 0) {
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (!got)
            continue;
        char *reply = NULL;
        if (engine_turn_start(e, conv, line) || engine_turn_wait(e, &reply)) {
            putchar('\n');
            rc = EXIT_RUNTIME;
            break;
        }
        free(reply);
        putchar('\n');
        fflush(stdout);
        interrupted = 0; /* Ctrl-C stopped this reply only */
    }
    free(line);
    signal(SIGINT, SIG_DFL);
    running_engine = NULL;
out:
    engine_free(e);
    events_log_close(&log);
    unload_model(&lm);
    return rc;
}
