/* kvchat get-model: a GPT-2 checkpoint from Hugging Face (or the mirror HF_ENDPOINT names): the
 * config and tokenizer, then model.safetensors, or pytorch_model.bin where a repository has only
 * that (DialoGPT and most 2019-2020 fine-tunes). Large files are checked against the size and
 * SHA-256 the hub reports before they are renamed into place. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../../kernels/err.h"
#include "../../model/config.h"
#include "../../model/pytorch.h"
#include "../../model/safetensors.h"
#include "../../model/tokenizer.h"
#include "commands.h"
#include "../hub/download.h"
#include "../files.h"
#include "../options.h"

const char GET_MODEL_HELP[] =
    "usage: kvchat get-model NAME|OWNER/REPO [--dir DIR]\n"
    "\n"
    "NAME: gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2, dialogpt-small, dialogpt-medium,\n"
    "dialogpt-large; or any GPT-2-architecture repository as OWNER/REPO.\n"
    "\n"
    "Downloads config.json, vocab.json and merges.txt (GPT-2's own, shipped with kvchat, where\n"
    "the repository lacks them), then model.safetensors, or pytorch_model.bin where there is no\n"
    "safetensors file (read without running pickle; kvchat convert DIR makes later loads\n"
    "faster), into ${XDG_CACHE_HOME:-~/.cache}/kvchat/models/NAME (or DIR), and prints that\n"
    "directory. Each file arrives as FILE.part and is renamed only when complete and, for the\n"
    "weights, when its size and SHA-256 match what the hub reports; an interrupted download\n"
    "resumes where it stopped. Files already complete are kept when they still check out.\n"
    "\n"
    "Nothing but the file is kept: before a file is renamed into place, config.json must be a\n"
    "GPT-2 config, vocab.json and merges.txt must load as a tokenizer, and the weights' header\n"
    "must parse. An HTML page (a captive portal), a config.json over 1 MiB, a vocab.json or\n"
    "merges.txt over 8 MiB, weights longer than the size announced (or than 8 GiB where a\n"
    "mirror announces none), and a download that would leave less than 256 MiB on the disk are\n"
    "stopped and removed; weights the disk has no room for are refused before they start. A\n"
    "server that sends nothing for the time limit (60 s) is given up on, and so is a small file\n"
    "not complete by then or a transfer under 1 KiB/s for that long.\n"
    "\n"
    "environment:\n"
    "  HF_ENDPOINT          the hub's address (default https://huggingface.co), for a mirror\n"
    "  HF_TOKEN             an access token, for gated or private repositories\n"
    "  KVCHAT_HTTP_TIMEOUT  the time limit above, in seconds (default 60)\n";

static const struct {
    const char *name, *repo;
} SHORTCUTS[] = {
    {"gpt2", "openai-community/gpt2"},
    {"gpt2-medium", "openai-community/gpt2-medium"},
    {"gpt2-large", "openai-community/gpt2-large"},
    {"gpt2-xl", "openai-community/gpt2-xl"},
    {"distilgpt2", "distilbert/distilgpt2"},
    {"dialogpt-small", "microsoft/DialoGPT-small"},
    {"dialogpt-medium", "microsoft/DialoGPT-medium"},
    {"dialogpt-large", "microsoft/DialoGPT-large"},
};

/* ---- what arrived is checked before it is renamed into place ---- */

static int check_config(const char *path)
{
    gpt2_config c;
    return cfg_load(&c, path) || cfg_validate(&c) ? -1 : 0;
}

static int check_vocab(const char *path)
{
    json_error_t e;
    json_t *v = json_load_file(path, 0, &e);
    const char *key;
    json_t *id;
    int ok = json_is_object(v) && json_object_size(v) > 0;
    json_object_foreach(v, key, id) ok = ok && json_is_integer(id);
    json_decref(v);
    return ok ? 0 : err_set("not a vocabulary (a JSON object of token ids)");
}

static int check_merges(const char *path)
{
    /* with the vocab.json of the folder the merges arrive in */
    char vocab[PATH_MAX + 16];
    const char *slash = strrchr(path, '/');
    snprintf(vocab, sizeof vocab, "%.*s/vocab.json", slash ? (int)(slash - path) : 1,
             slash ? path : ".");
    tokenizer *t = tok_load(vocab, path);
    tok_free(t);
    return t ? 0 : -1;
}

static int check_weights(const char *path)
{
    st_file f;
    size_t n = strlen(path);
    /* the kind is in the name, that of the file or of the part it arrives in */
    int bin =
        (n > 4 && !strcmp(path + n - 4, ".bin")) || (n > 9 && !strcmp(path + n - 9, ".bin.part"));
    if (bin ? pt_open(&f, path) : st_open(&f, path))
        return -1;
    st_close(&f);
    return 0;
}

/* the small files: each one's cap (a few MB at most, where GPT-2's are 1 KB to 1 MB) and check */
static const struct {
    const char *name;
    int64_t max;
    int (*check)(const char *path);
} SMALL[] = {
    {"config.json", 1 << 20, check_config},
    {"vocab.json", 8 << 20, check_vocab},
    {"merges.txt", 8 << 20, check_merges},
};
static const char *const WEIGHTS[] = {"model.safetensors", "pytorch_model.bin"};
#define WEIGHTS_MAX (8ll << 30)

static int valid_repo(const char *name)
{
    const char *slash = strchr(name, '/');
    size_t len = strlen(name);
    return slash && slash != name && slash[1] && !strchr(slash + 1, '/') && len < 200 &&
           !strstr(name, "..") &&
           strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./") ==
               len;
}

/* a complete file from an earlier run: kept when it passes its check, else fetched again (a page a
 * captive portal served to an older kvchat, say) */
static int complete(const char *path, int (*check)(const char *path))
{
    if (file_size(path) <= 0)
        return 0;
    if (!check || !check(path))
        return 1;
    fprintf(stderr, "kvchat: %s is not usable (%s): fetching it again\n", path, err_msg());
    unlink(path);
    return 0;
}

/* The first weights file the repository has, fetched and verified. */
static int fetch_weights(const char *base, const char *dir)
{
    char url[1024], dst[PATH_MAX + 32];
    for (size_t i = 0; i < sizeof WEIGHTS / sizeof WEIGHTS[0]; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, WEIGHTS[i]);
        if (complete(dst, check_weights))
            return 0;
    }
    for (size_t i = 0; i < sizeof WEIGHTS / sizeof WEIGHTS[0]; i++) {
        dl_info info;
        int missing;
        snprintf(url, sizeof url, "%s/%s", base, WEIGHTS[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, WEIGHTS[i]);
        if (dl_head(url, &info))
            return -1;
        if (!info.found)
            continue;
        info.check = check_weights;
        if (info.size < 0) /* a mirror that says no size: GPT-2 XL's 6.4 GB is the largest */
            info.max = WEIGHTS_MAX;
        if (!dl_fetch(url, dst, &info, WEIGHTS[i], &missing))
            return 0;
        if (!missing) /* the hub answered HEAD but not GET with a 404: try the other file too */
            return -1;
    }
    return err_set("%s has neither model.safetensors nor pytorch_model.bin", base);
}

int cmd_get_model(int argc, char **argv)
{
    const char *name = NULL, *dir_opt = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if ((r = opt_match(argc, argv, &i, NULL, "--dir", &v)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
            dir_opt = v;
        } else if (argv[i][0] == '-') {
            return err_set("unknown option '%s' (see kvchat get-model --help)", argv[i]),
                   EXIT_USAGE;
        } else if (name) {
            return err_set("one model at a time (got '%s' and '%s')", name, argv[i]), EXIT_USAGE;
        } else {
            name = argv[i];
        }
    }
    if (!name)
        return err_set("which model? gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2, "
                       "dialogpt-small|medium|large "
                       "or OWNER/REPO"),
               EXIT_USAGE;
    const char *repo = NULL, *local = name;
    for (size_t i = 0; i < sizeof SHORTCUTS / sizeof SHORTCUTS[0]; i++)
        if (!strcmp(name, SHORTCUTS[i].name))
            repo = SHORTCUTS[i].repo;
    if (!repo && !strchr(name, '/'))
        return err_set(
                   "unknown model '%s': use gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2, "
                   "dialogpt-small|medium|large or OWNER/REPO",
                   name),
               EXIT_USAGE;
    if (!repo) {
        if (!valid_repo(name))
            return err_set("'%s' is not a Hugging Face repository name (OWNER/REPO)", name),
                   EXIT_USAGE;
        repo = name;
        local = strchr(name, '/') + 1;
    }
    const char *endpoint = getenv("HF_ENDPOINT");
    if (!endpoint || !*endpoint)
        endpoint = "https://huggingface.co";
    if (strncmp(endpoint, "https://", 8) && strncmp(endpoint, "http://", 7))
        return err_set("HF_ENDPOINT '%s' is not an http:// or https:// address", endpoint),
               EXIT_USAGE;
    char dir[PATH_MAX], base[1024];
    if (dir_opt)
        snprintf(dir, sizeof dir, "%s", dir_opt);
    else if (model_cache_dir(dir, sizeof dir, local))
        return EXIT_RUNTIME;
    snprintf(base, sizeof base, "%.*s/%s/resolve/main",
             (int)(strlen(endpoint) - (endpoint[strlen(endpoint) - 1] == '/')), endpoint, repo);
    struct stat sb;
    int existed = !stat(dir, &sb);
    if (make_dirs(dir) || dl_init())
        return EXIT_RUNTIME;
    int rc = 0;
    /* the small files first: the first doubles as the check that the network and repository answer;
     * a fine-tune without GPT-2's tokenizer files gets the ones kvchat ships */
    for (size_t i = 0; !rc && i < sizeof SMALL / sizeof SMALL[0]; i++) {
        char dst[PATH_MAX + 32], url[1024];
        int missing;
        dl_info want = {.size = -1, .max = SMALL[i].max, .check = SMALL[i].check};
        snprintf(dst, sizeof dst, "%s/%s", dir, SMALL[i].name);
        snprintf(url, sizeof url, "%s/%s", base, SMALL[i].name);
        if (complete(dst, SMALL[i].check) || !dl_fetch(url, dst, &want, SMALL[i].name, &missing))
            continue;
        rc = -1;
        if (missing && i > 0 && !(rc = copy_asset(SMALL[i].name, dst)))
            fprintf(stderr, "kvchat: %s is not in %s: using GPT-2's own, which kvchat ships\n",
                    SMALL[i].name, repo);
    }
    if (!rc)
        rc = fetch_weights(base, dir);
    dl_done();
    if (rc && !existed)
        rmdir(dir); /* offline, say: no empty folder left to look like a model (a part keeps it) */
    if (rc)
        return EXIT_RUNTIME;
    printf("%s\n", dir);
    return 0;
}
