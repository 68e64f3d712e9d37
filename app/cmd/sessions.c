/* kvchat sessions: the saved sessions, newest first, and the newest one for --resume last. Each
 * file is read as far as its header and counted by its turn_end lines, so a long list stays quick.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../safe_text.h"
#include "commands.h"
#include "../files.h"
#include "../options.h"
#include "../session/session.h"
#include "sessions.h"

const char SESSIONS_HELP[] =
    "usage: kvchat sessions [-n N]\n"
    "\n"
    "Lists the sessions the chat saved (${XDG_DATA_HOME:-~/.local/share}/kvchat/sessions), newest\n"
    "first: when each began, its completed turns, its model and its size; at most N of them "
    "(default\n"
    "20). kvchat replay FILE plays one back; kvchat chat --resume last continues the newest.\n";

typedef struct {
    char path[PATH_MAX];
    time_t mtime;
    long long size;
} entry;

static int newest_first(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return x->mtime != y->mtime ? (x->mtime < y->mtime ? 1 : -1) : strcmp(y->path, x->path);
}

/* the .jsonl files of the sessions folder, newest first; an absent folder is an empty list */
static int list(entry **out, int *n)
{
    char dir[PATH_MAX];
    *out = NULL;
    *n = 0;
    if (session_dir(dir, sizeof dir))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : err_set("%s: %s", dir, strerror(errno));
    size_t cap = 0;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        size_t len = strlen(de->d_name);
        struct stat sb;
        if (len < 7 || strcmp(de->d_name + len - 6, ".jsonl"))
            continue;
        if (err_grow(out, &cap, (size_t)*n + 1, sizeof **out, "the session list")) {
            rc = -1;
            break;
        }
        entry *e = &(*out)[*n];
        snprintf(e->path, sizeof e->path, "%s/%s", dir, de->d_name);
        if (stat(e->path, &sb) || !S_ISREG(sb.st_mode))
            continue;
        e->mtime = sb.st_mtime;
        e->size = (long long)sb.st_size;
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(*out, (size_t)*n, sizeof **out, newest_first);
    return rc;
}

int sessions_latest(char *buf, size_t n)
{
    entry *e;
    int count;
    char dir[PATH_MAX];
    if (list(&e, &count))
        return -1;
    if (!count) {
        free(e);
        return session_dir(dir, sizeof dir) ? -1
                                            : err_set("--resume last: no saved session in %s", dir);
    }
    snprintf(buf, n, "%s", e[0].path);
    free(e);
    return 0;
}

enum { LINE_PIECE = 64 << 10 }; /* what describe() reads of a line at a time */

/* what a row says of a session: its header's start time and model, and its completed turns */
static void describe(const char *path, char *when, size_t wn, char *model, size_t mn, int *turns)
{
    snprintf(when, wn, "?");
    snprintf(model, mn, "?");
    *turns = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    /* read in pieces of at most LINE_PIECE: a line of any length (a hostile 3 GiB header) costs
     * no more memory; the writer puts "ev" first, so a line's first piece says what it is */
    static char line[LINE_PIECE];
    char turn_end[64];
    snprintf(turn_end, sizeof turn_end, "\"ev\":\"%s\"", ev_kind_name(EVK_TURN_END));
    for (int first = 1, starts = 1; fgets(line, sizeof line, f); first = 0) {
        size_t got = strlen(line);
        int whole = got && line[got - 1] == '\n', starting = starts;
        starts = whole;
        if (!starting)
            continue;
        if (first && whole) { /* a header longer than a piece is not one kvchat wrote */
            json_t *h = json_loadb(line, got, 0, NULL);
            const char *c = json_string_value(json_object_get(h, "created")),
                       *m = json_string_value(json_object_get(json_object_get(h, "model"), "name"));
            if (c) /* the file's own words: escaped, as every string from a file */
                safe_copy(when, wn < 20 ? wn : 20, c);
            if (m)
                safe_copy(model, mn, m);
            json_decref(h);
        } else if (strstr(line, turn_end)) {
            (*turns)++;
        }
    }
    fclose(f);
}

int sessions_print(int max)
{
    entry *e;
    int n;
    char dir[PATH_MAX];
    if (list(&e, &n) || session_dir(dir, sizeof dir))
        return -1;
    if (!n)
        printf("no saved sessions in %s\n", dir);
    else
        printf("%-19s  %5s  %-24s  %9s  %s\n", "began (UTC)", "turns", "model", "size", "file");
    for (int i = 0; i < n && i < max; i++) {
        char when[32], model[128], size[32];
        int turns;
        describe(e[i].path, when, sizeof when, model, sizeof model, &turns);
        double b = (double)e[i].size;
        snprintf(size, sizeof size,
                 b >= 1 << 20 ? "%.1f MiB"
                 : b >= 1024  ? "%.1f KiB"
                              : "%.0f B",
                 b >= 1 << 20 ? b / (1 << 20)
                 : b >= 1024  ? b / 1024
                              : b);
        char path[PATH_MAX];
        printf("%-19s  %5d  %-24.24s  %9s  %s\n", when, turns, model, size,
               safe_copy(path, sizeof path, e[i].path));
    }
    if (n > max)
        printf("(%d more: kvchat sessions -n %d)\n", n - max, n);
    free(e);
    return 0;
}

int cmd_sessions(int argc, char **argv)
{
    int max = 20;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r = opt_match(argc, argv, &i, "-n", NULL, &v);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0) {
            if (opt_int("-n", v, 1, 1 << 20, &max))
                return EXIT_USAGE;
        } else {
            return err_set("unknown option '%s' (see kvchat sessions --help)", argv[i]), EXIT_USAGE;
        }
    }
    return sessions_print(max) ? EXIT_RUNTIME : 0;
}
