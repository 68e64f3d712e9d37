/* kvchat: the entry point. Dispatches subcommands and is the one place errors are printed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/backend.h"
#include "../kernels/err.h"
#include "cmd/commands.h"
#include "files.h"
#include "options.h"
#include "safe_text.h"

#ifndef KVCHAT_VERSION
#define KVCHAT_VERSION "0.1.0"
#endif

static const char USAGE[] =
    "kvchat " KVCHAT_VERSION ": GPT-2 chat with a KV cache you can watch\n"
    "\n"
    "usage: kvchat [options]              the full-screen chat (kvchat chat --help)\n"
    "       kvchat COMMAND [options]      (kvchat COMMAND --help for its options)\n"
    "\n"
    "commands:\n"
    "  chat             the full-screen chat (--no-tui: one message per line on stdin)\n"
    "  replay           play a saved session back (--no-tui: transcript; --verify: rerun it)\n"
    "  sessions         the saved sessions, newest first\n"
    "  generate         continue a prompt, streaming tokens to stdout\n"
    "  tokenize         text to GPT-2 token ids, or ids back to text with --decode\n"
    "  info             a model's shape, parameters, weight bytes and KV-cache memory\n"
    "  bench            prefill and decode speed on this machine\n"
    "  perplexity       how well a model predicts a text (and KL against a base run)\n"
    "  get-model        download a GPT-2 checkpoint from Hugging Face\n"
    "  convert          rewrite a pytorch_model.bin as model.safetensors (faster loads)\n"
    "  selftest         check the GPU against the CPU on a model (done once, cached, before first "
    "use)\n"
    "  make-tiny-model  write a random-weight GPT-2 checkpoint (tests, demos)\n"
    "\n"
    "environment:\n"
    "  KVCHAT_MODEL     default model directory (else ~/.cache/kvchat/models/gpt2)\n";

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *help;
} COMMANDS[] = {
    {"chat", cmd_chat, CHAT_HELP},
    {"replay", cmd_replay, REPLAY_HELP},
    {"sessions", cmd_sessions, SESSIONS_HELP},
    {"generate", cmd_generate, GENERATE_HELP},
    {"tokenize", cmd_tokenize, TOKENIZE_HELP},
    {"info", cmd_info, INFO_HELP},
    {"bench", cmd_bench, BENCH_HELP},
    {"perplexity", cmd_perplexity, PERPLEXITY_HELP},
    {"get-model", cmd_get_model, GET_MODEL_HELP},
    {"convert", cmd_convert, CONVERT_HELP},
    {"selftest", cmd_selftest, SELFTEST_HELP},
    {"make-tiny-model", cmd_make_tiny_model, MAKE_TINY_MODEL_HELP},
};

/* A standard descriptor closed at start (`kvchat ... >&-`) would be the number the next file opened
 * gets: a session or a logits dump would then take the replies or the progress lines. Each closed
 * one is held open on /dev/null instead, as careful daemons do. */
static int hold_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF &&
            open("/dev/null", fd ? O_WRONLY : O_RDONLY) != fd)
            return -1;
    return 0;
}

/* The one printer of errors: a message may quote a session's or a server's strings (a recorded
 * model directory, say), so it reaches the terminal escaped, as one line. */
static void print_error(const char *cmd)
{
    static char line[8192];
    if (err_was_said())
        return;
    fprintf(stderr, "%s%s: %s\n", strcmp(cmd, "kvchat") ? "kvchat " : "", cmd,
            safe_copy(line, sizeof line, err_msg()));
}

int main(int argc, char **argv)
{
    kb_process_start(argv);
    if (hold_std_fds())
        return EXIT_RUNTIME; /* no /dev/null: nowhere to say so either */
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") &&
                     strcmp(argv[1], "--version"))) {
        /* plain `kvchat [options]` is the chat */
        int rc = cmd_chat(argc, argv);
        if (rc == EXIT_RUNTIME || rc == EXIT_USAGE)
            print_error("kvchat");
        return rc;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kvchat " KVCHAT_VERSION "\nassets: %s\ndevices: %s\n", assets_dir(),
               kb_devices_built());
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) {
            for (int k = 2; k < argc; k++)
                if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
                    fputs(COMMANDS[i].help, stdout);
                    return 0;
                }
            int rc = COMMANDS[i].run(argc - 1, argv + 1);
            if (rc == EXIT_RUNTIME || rc == EXIT_USAGE)
                print_error(argv[1]);
            return rc;
        }
    fprintf(stderr, "kvchat: unknown command '%s' (see kvchat --help)\n", argv[1]);
    return EXIT_USAGE;
}
