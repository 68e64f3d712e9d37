/* kvchat tokenize: text to GPT-2 ids, or ids back to text. Needs only the tokenizer files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "commands.h"
#include "../files.h"
#include "../options.h"
#include "../safe_text.h"

const char TOKENIZE_HELP[] =
    "usage: kvchat tokenize [-m DIR] [--special] [TEXT]\n"
    "       kvchat tokenize [-m DIR] --decode \"ID ID ...\"\n"
    "\n"
    "Prints the token ids of TEXT (or of all of standard input when TEXT is absent), separated by\n"
    "spaces; with --decode, prints the text of the ids. Invalid UTF-8 in the input is replaced by\n"
    "U+FFFD before tokenizing.\n"
    "\n"
    "  -m, --model DIR   model directory holding vocab.json and merges.txt (default\n"
    "                    $KVCHAT_MODEL, else GPT-2's own tokenizer, which kvchat ships)\n"
    "      --special     treat \"<|endoftext|>\" in the text as the special token 50256\n";

static int decode(const tokenizer *t, const char *list)
{
    tok_stream ts;
    tok_stream_init(&ts, t);
    int raw = !isatty(STDOUT_FILENO), rc = 0;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *end;
        long id = strtol(p, &end, 10);
        size_t len;
        if (end == p || id < 0 || id >= tok_vocab_size(t) || !tok_piece(t, (int)id, &len)) {
            rc = err_set("--decode: '%.*s' is not a token id (0..%d)", (int)strcspn(p, " ,\n\t"), p,
                         tok_vocab_size(t) - 1);
            break;
        }
        const char *text = tok_stream_push(&ts, (int)id, &len);
        safe_fwrite(stdout, text, len, raw);
        p = end;
    }
    size_t len;
    const char *rest = tok_stream_flush(&ts, &len);
    if (!rc) {
        safe_fwrite(stdout, rest, len, raw);
        putchar('\n');
    }
    tok_stream_free(&ts);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    const char *text = NULL, *ids = NULL;
    int special = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = opt_match(argc, argv, &i, "-m", "--model", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            mo.model_dir = v;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--decode", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            ids = v;
        } else if (opt_match(argc, argv, &i, NULL, "--special", NULL)) {
            special = 1;
        } else if (!strcmp(argv[i], "--")) {
            if (i + 1 < argc)
                text = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return err_set("unknown option '%s' (see kvchat tokenize --help)", argv[i]), EXIT_USAGE;
        } else if (text) {
            return err_set("give the text as one argument (quote it), or on standard input"),
                   EXIT_USAGE;
        } else {
            text = argv[i];
        }
    }
    if (ids && text)
        return err_set("--decode takes ids, not text"), EXIT_USAGE;
    /* every GPT-2 checkpoint shares one tokenizer: no model is needed unless one is named */
    char dir[4096];
    const char *env = getenv("KVCHAT_MODEL");
    if (!mo.model_dir && (!env || !*env))
        snprintf(dir, sizeof dir, "%s", assets_dir());
    else if (!resolve_model_dir(&mo, dir, sizeof dir))
        return EXIT_RUNTIME;
    tokenizer *t = tok_load_dir(dir);
    if (!t)
        return EXIT_RUNTIME;
    int rc = 0;
    if (ids) {
        rc = decode(t, ids) ? EXIT_RUNTIME : 0;
    } else {
        size_t len = 0;
        char *input = text ? NULL : read_all(stdin, &len, "standard input");
        int *out = NULL, n = 0, cap = 0;
        if ((!text && !input) ||
            tok_encode(t, text ? text : input, text ? strlen(text) : len, special, &out, &n, &cap))
            rc = EXIT_RUNTIME;
        for (int i = 0; !rc && i < n; i++)
            printf(i ? " %d" : "%d", out[i]);
        if (!rc)
            putchar('\n');
        free(out);
        free(input);
    }
    tok_free(t);
    return rc;
}
