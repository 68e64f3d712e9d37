/* kvchat get-model: download a GPT-2 checkpoint from Hugging Face with curl, each file to a .part
 * name renamed into place only when complete, so an interrupted download never looks finished. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/err.h"
#include "commands.h"
#include "files.h"
#include "options.h"

const char GET_MODEL_HELP[] =
    "usage: kvchat get-model gpt2|gpt2-medium|gpt2-large|gpt2-xl|OWNER/REPO [--dir DIR]\n"
    "\n"
    "Downloads config.json, model.safetensors, vocab.json and merges.txt from Hugging Face into\n"
    "${XDG_CACHE_HOME:-~/.cache}/kvchat/models/NAME (or DIR), with a progress bar. Files already\n"
    "complete are kept. Needs curl and a network connection.\n";

static const char *const FILES[] = {"config.json", "vocab.json", "merges.txt", "model.safetensors"};

static const char *curl_reason(int code)
{
    switch (code) {
    case 5: return "could not resolve the proxy";
    case 6: return "could not resolve huggingface.co (no network or DNS?)";
    case 7: return "could not connect to huggingface.co (no network, or a firewall?)";
    case 22: return "the server answered with an error (no such repository or file?)";
    case 23: return "could not write the file (disk full?)";
    case 28: return "the connection timed out";
    case 35: case 60: return "TLS failed (check the system's CA certificates)";
    case 56: return "the connection broke off";
    default: return "curl failed";
    }
}

/* Small files download silently (the first one doubles as the connectivity check, so an offline
 * machine sees one clear line); the weights get curl's progress bar. */
static int fetch(const char *url, const char *dst, const char *name, int progress)
{
    char part[PATH_MAX];
    snprintf(part, sizeof part, "%s.part", dst);
    if (progress)
        fprintf(stderr, "%s\n", name);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return err_set("fork: %s", strerror(errno));
    if (pid == 0) {
        /* -C - resumes a .part left by an interrupted run */
        if (!progress && !freopen("/dev/null", "w", stderr))
            _exit(126);
        execlp("curl", "curl", "-fL", "--retry", "2", "--connect-timeout", "20", "-C", "-",
               progress ? "--progress-bar" : "--silent", "-o", part, url, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return err_set("waitpid: %s", strerror(errno));
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    if (code == 127)
        return err_set("curl is not installed; install it (apt-get install curl) and try again");
    if (code)
        return err_set("downloading %s: %s (curl exit %d). Without a network, pass -m DIR with a local "
                       "checkpoint, or try the offline demo: make demo",
                       url, curl_reason(code), code);
    if (rename(part, dst))
        return err_set("%s: %s", dst, strerror(errno));
    return 0;
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
            return err_set("unknown option '%s' (see kvchat get-model --help)", argv[i]), EXIT_USAGE;
        } else if (name) {
            return err_set("one model at a time (got '%s' and '%s')", name, argv[i]), EXIT_USAGE;
        } else {
            name = argv[i];
        }
    }
    if (!name)
        return err_set("which model? gpt2, gpt2-medium, gpt2-large, gpt2-xl or OWNER/REPO"), EXIT_USAGE;
    char repo[256], local[256];
    const char *slash = strchr(name, '/');
    if (!slash) {
        if (strcmp(name, "gpt2") && strcmp(name, "gpt2-medium") && strcmp(name, "gpt2-large") && strcmp(name, "gpt2-xl"))
            return err_set("unknown model '%s': use gpt2, gpt2-medium, gpt2-large, gpt2-xl or OWNER/REPO", name),
                   EXIT_USAGE;
        snprintf(repo, sizeof repo, "openai-community/%s", name);
        snprintf(local, sizeof local, "%s", name);
    } else {
        size_t len = strlen(name);
        if (slash == name || !slash[1] || strchr(slash + 1, '/') || len >= 200 ||
            strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./") != len ||
            strstr(name, ".."))
            return err_set("'%s' is not a Hugging Face repository name (OWNER/REPO)", name), EXIT_USAGE;
        snprintf(repo, sizeof repo, "%s", name);
        snprintf(local, sizeof local, "%s", slash + 1);
    }
    char dir[PATH_MAX];
    if (dir_opt)
        snprintf(dir, sizeof dir, "%s", dir_opt);
    else if (model_cache_dir(dir, sizeof dir, local))
        return EXIT_RUNTIME;
    if (make_dirs(dir))
        return EXIT_RUNTIME;
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        char dst[PATH_MAX + 64], url[512];
        snprintf(dst, sizeof dst, "%s/%s", dir, FILES[i]);
        struct stat sb;
        if (!stat(dst, &sb) && sb.st_size > 0)
            continue;
        snprintf(url, sizeof url, "https://huggingface.co/%s/resolve/main/%s", repo, FILES[i]);
        if (fetch(url, dst, FILES[i], !strcmp(FILES[i], "model.safetensors")))
            return EXIT_RUNTIME;
    }
    printf("%s\n", dir);
    return 0;
}
