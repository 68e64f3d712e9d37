/* The chat's slash commands and their table (actions.h). */
#include "actions.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/err.h"
#include "../ui/format.h"
#include "files.h"
#include "options.h"
#include "redo.h"
#include "show.h"

static void say(act_host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(act_host *h, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    h->say(h, line);
}

/* the engine's error for command `name` */
static act_result failed(act_host *h, const char *name)
{
    say(h, "/%s: %s", name, err_msg());
    return ACT_DONE;
}

static int exists(const act_host *h, int conv)
{
    for (int i = 0; i < engine_conv_count(h->e); i++)
        if (engine_conv_id(h->e, i) == conv)
            return 1;
    return 0;
}

static void move_to(act_host *h, int conv)
{
    h->conv = conv;
    if (h->switched)
        h->switched(h);
}

/* turn N as the user counts them: the turns after the preamble that are in the window; -1: none,
 * -2: the engine refused (err_msg says why) */
static int turn_index(act_host *h, const char *arg, int pinned_default)
{
    int n;
    const win_turn *turns = engine_turns(h->e, h->conv, &n);
    if (n < 0)
        return -2;
    if (!*arg) {
        for (int i = n - 1; i >= 0; i--)
            if (turns[i].role == ROLE_USER && (!pinned_default || turns[i].pinned))
                return i;
        return -1;
    }
    char *end;
    long want = strtol(arg, &end, 10);
    int k = 0;
    for (int i = 0; i < n && !*end; i++)
        if (turns[i].role != ROLE_PREAMBLE && ++k == want)
            return i;
    return -1;
}

/* the turns /pin can name: the window's, but for the preamble */
static int pinnable(act_host *h)
{
    int n, k = 0;
    const win_turn *turns = engine_turns(h->e, h->conv, &n);
    for (int i = 0; i < n; i++)
        k += turns[i].role != ROLE_PREAMBLE;
    return k;
}

static act_result quit(act_host *h, const char *name, char *args)
{
    (void)h, (void)name, (void)args;
    return ACT_QUIT;
}

static act_result help(act_host *h, const char *name, char *args)
{
    (void)h, (void)name, (void)args;
    return ACT_HELP;
}

static act_result set(act_host *h, const char *name, char *args)
{
    (void)name;
    char *key = strtok(args, " "), *val = strtok(NULL, " ");
    model_opts mo = *engine_model_opts(h->e);
    if (!key || !val)
        say(h, "/set needs a name and a value: /set temp 0.7");
    else if (opt_set_sampling(key, val, &mo))
        say(h, "/set: %s", err_msg());
    else
        say(h, "%s = %s%s", key, val,
            engine_set_sampling(h->e, &mo.sp, mo.n_predict)
                ? " from the next reply (this one keeps its settings)"
                : "");
    return ACT_DONE;
}

/* this conversation as a session of its own (session_extract), counted into *k */
static json_t **conv_events(act_host *h, int *k)
{
    if (h->events_lock)
        pthread_mutex_lock(h->events_lock);
    size_t n = json_array_size(h->events);
    json_t **all = err_malloc(sizeof *all * (n + 1), "the chat's events");
    for (size_t i = 0; all && i < n; i++)
        all[i] = json_array_get(h->events, i);
    json_t **evs = all ? session_extract(all, (int)n, h->conv, k) : NULL;
    if (h->events_lock)
        pthread_mutex_unlock(h->events_lock);
    free(all);
    return evs;
}

/* /save [FILE]: the current conversation as a session file of its own; /save! replaces a file */
static act_result save(act_host *h, const char *name, char *arg)
{
    char path[4096];
    const char *live = h->persist->session_path;
    if (*arg ? user_path(path, sizeof path, arg)
             : session_default_path(path, sizeof path) || make_parent_dirs(path))
        return failed(h, "save");
    /* renaming over the live file would leave every later turn in an unlinked file */
    if (live && same_file(path, live)) {
        say(h,
            "/save: %s is this chat's session file, already saved as you chat; "
            "choose another name",
            path);
        return ACT_DONE;
    }
    int lock; /* the write claims the file again, held over its rename */
    if (file_claim(path, name[4] == '!', "/save! FILE replaces it", &lock))
        return failed(h, "save");
    if (lock >= 0)
        close(lock);
    json_t *header = h->persist->header ? json_incref((json_t *)h->persist->header)
                                        : session_header(h->lm, engine_model_opts(h->e), h->eo);
    int k;
    json_t **evs = conv_events(h, &k);
    if (!header || !evs || session_write_file(path, header, evs, k))
        failed(h, "save");
    else
        say(h, "saved conversation %d to %s", h->conv, path);
    for (int i = 0; evs && i < k; i++)
        json_decref(evs[i]);
    free(evs);
    json_decref(header);
    return ACT_DONE;
}

static act_result new_conv(act_host *h, const char *name, char *args)
{
    (void)name, (void)args;
    int id = engine_new_conv(h->e);
    if (id < 0)
        return failed(h, "new");
    move_to(h, id);
    say(h, "conversation %d", id);
    return ACT_DONE;
}

static act_result conv(act_host *h, const char *name, char *args)
{
    (void)name;
    char *end;
    long id = strtol(args, &end, 10);
    int n = engine_conv_count(h->e);
    if (!*args)
        say(h, "/conv needs a number (1..%d)", n);
    else if (*end || id < 1 || id > INT_MAX || !exists(h, (int)id))
        say(h, "/conv %s: no such conversation (they are 1..%d)", args, n);
    else
        move_to(h, (int)id);
    return ACT_DONE;
}

static act_result fork_conv(act_host *h, const char *name, char *args)
{
    (void)name, (void)args;
    int parent = h->conv, id = engine_fork(h->e, parent);
    if (id < 0)
        return failed(h, "fork");
    if (h->forked)
        h->forked(h, parent, id);
    move_to(h, id);
    say(h, "forked conversation %d into %d (blocks shared until written)", parent, id);
    return ACT_DONE;
}

static act_result system_text(act_host *h, const char *name, char *args)
{
    (void)name;
    int n_turns;
    const char *now = engine_system(h->e);
    engine_turns(h->e, h->conv, &n_turns);
    if (!*args)
        say(h, "system preamble: %s", now ? now : "the template's own");
    else if (engine_set_system(h->e, args))
        failed(h, "system");
    else
        say(h, "system preamble set: it opens %s conversation from now on (/new)",
            n_turns == 0 ? "this and every new" : "every new");
    return ACT_DONE;
}

static act_result edit(act_host *h, const char *name, char *args)
{
    (void)name;
    if (!*args) {
        say(h, "/edit needs the new text of your last message: /edit TEXT");
        return ACT_DONE;
    }
    int n, last = turn_index(h, "", 0);
    const win_turn *turns = engine_turns(h->e, h->conv, &n);
    /* said first: the reply streams as soon as the edit starts */
    if (last >= 0 && last < n && turns[last].pinned) /* the pin was the old message's */
        say(h, "/edit: the old message was pinned, the new one is not (/pin pins it)");
    if (engine_edit_start(h->e, h->conv, args))
        return failed(h, "edit");
    if (h->edited)
        h->edited(h, args);
    return ACT_REPLY;
}

static act_result retry(act_host *h, const char *name, char *args)
{
    (void)name, (void)args;
    if (engine_can_retry(h->e, h->conv))
        return failed(h, "retry");
    if (h->retrying)
        h->retrying(h);
    if (engine_turn_start(h->e, h->conv, NULL))
        return failed(h, "retry");
    return ACT_REPLY;
}

static act_result clear(act_host *h, const char *name, char *args)
{
    (void)name, (void)args;
    if (engine_clear(h->e, h->conv))
        return failed(h, "clear");
    if (h->cleared)
        h->cleared(h);
    say(h, "cleared: the cache rolled back to the kept prefix");
    return ACT_DONE;
}

static act_result pin(act_host *h, const char *name, char *args)
{
    int on = name[0] == 'p', idx = turn_index(h, args, !on);
    if (idx == -2 || (idx >= 0 && engine_pin(h->e, h->conv, idx, on)))
        return failed(h, name);
    const char *which = *args ? "turn " : on ? "your last message" : "your last pinned message";
    int k = pinnable(h);
    char range[64] = "the window holds no turn yet";
    if (k)
        snprintf(range, sizeof range, "the window's turns are 1..%d, 1 the oldest", k);
    if (idx < 0 && *args)
        say(h, "/%s %s: no such turn (%s)", name, args, range);
    else if (idx < 0)
        say(h, "/%s: %s (/%s N: %s)", name,
            on ? "no message of yours in the window" : "no pinned message", name, range);
    else
        say(h, "%s%s %s", which, args, on ? "pinned: eviction skips it" : "unpinned");
    return ACT_DONE;
}

typedef struct {
    const char *name, *alias[3]; /* the other names it answers to */
    const char *args;
    const char *help; /* its /help line */
    const char *doc;  /* the README's (NULL: the help line) */
    act_result (*run)(act_host *h, const char *name, char *args);
    ev_kind event; /* the event it records, which replay --verify redoes (EVK_NONE: none) */
    int (*redo)(engine *e, const json_t *ev);
} act_def;

static const act_def table[] = {
    {"new", {0}, "", "a new conversation", NULL, new_conv, EVK_NEW, act_redo_new},
    {"conv", {0}, "N", "switch to conversation N", NULL, conv, EVK_NONE, NULL},
    {"fork",
     {0},
     "",
     "a new conversation sharing this one's cache blocks (copied on write)",
     NULL,
     fork_conv,
     EVK_FORK,
     act_redo_fork},
    {"retry",
     {0},
     "",
     "regenerate the last reply, rolling the cache back rather than recomputing",
     NULL,
     retry,
     EVK_NONE,
     NULL},
    {"edit",
     {0},
     "TEXT",
     "replace your last message and its reply with TEXT, and reply to it",
     "replace your last message (and its reply) with TEXT and reply to it, rolling the cache back "
     "to before it",
     edit,
     EVK_NONE,
     NULL},
    {"system",
     {0},
     "[TEXT]",
     "the system preamble of conversations still to start",
     "the system preamble of conversations whose first message is still to come (`--system TEXT` "
     "sets it at start): it replaces the template's preamble, is kept from eviction as the "
     "preamble is, and is recorded, so resume and `--verify` use it; without TEXT, says what it is",
     system_text,
     EVK_SYSTEM,
     act_redo_system},
    {"clear",
     {0},
     "",
     "drop every turn; the cache rolls back to the kept prefix",
     NULL,
     clear,
     EVK_CLEAR,
     act_redo_clear},
    {"pin",
     {0},
     "[N]",
     "keep turn N (default: your last message) from eviction",
     "protect turn N (each message is a turn, 1 = the oldest in the window; default: your last "
     "message) from eviction",
     pin,
     EVK_PIN,
     act_redo_pin},
    {"unpin",
     {0},
     "[N]",
     "let turn N (default: your last pinned message) be evicted again",
     NULL,
     pin,
     EVK_NONE,
     NULL},
    {"set",
     {0},
     "n|temp|top-k|top-p|repeat-penalty|seed VALUE",
     "change sampling for the next replies",
     "change sampling for the next replies (`top_k` and the like work too; `n` at least 1); during "
     "a reply, from the next one: the reply streaming keeps its settings",
     set,
     EVK_SET,
     act_redo_set},
    {"show",
     {0},
     "",
     "model, settings, cache plan and where the replies read",
     NULL,
     act_show,
     EVK_NONE,
     NULL},
    {"save",
     {"save!"},
     "[FILE]",
     "this conversation as a session file of its own (/save! replaces FILE)",
     "write this conversation to FILE as a session of its own (a fork's with what it shares with "
     "its parent): it replays, verifies and resumes alone; a file that exists is refused "
     "(`/save! FILE` replaces it), and a session another kvchat is writing is never replaced, nor "
     "this chat's own live session file",
     save,
     EVK_NONE,
     NULL},
    /* ollama's /? and /bye too, as users bring them */
    {"help", {"?"}, "", "this list (F1 in the full-screen chat)", NULL, help, EVK_NONE, NULL},
    {"quit",
     {"q", "exit", "bye"},
     "",
     "end the chat (a session being saved holds every turn already: /show says where)",
     NULL,
     quit,
     EVK_NONE,
     NULL},
};
enum { N_ACTS = sizeof table / sizeof table[0] };

static const act_def *find(const char *name)
{
    for (int i = 0; i < N_ACTS; i++) {
        const act_def *d = &table[i];
        if (!strcmp(name, d->name) || (d->alias[0] && !strcmp(name, d->alias[0])) ||
            (d->alias[1] && !strcmp(name, d->alias[1])) ||
            (d->alias[2] && !strcmp(name, d->alias[2])))
            return d;
    }
    return NULL;
}

int act_replay(engine *e, const json_t *ev)
{
    for (int i = 0; i < N_ACTS; i++)
        if (table[i].event != EVK_NONE && ev_kind_of(ev) == table[i].event)
            return table[i].redo(e, ev);
    return 0;
}

act_result act_run(act_host *h, char *line)
{
    char *name = line + 1, *args = strchr(name, ' ');
    if (args)
        *args++ = 0;
    else
        args = name + strlen(name);
    const act_def *d = find(name);
    if (!d) {
        say(h, "unknown command /%s (/help lists them)", name);
        return ACT_DONE;
    }
    return d->run(h, name, args);
}

/* "/name ARGS" */
static void usage(char *buf, size_t n, const act_def *d)
{
    snprintf(buf, n, "/%s%s%s", d->name, *d->args ? " " : "", d->args);
}

void act_help(FILE *f)
{
    char u[96];
    for (int i = 0; i < N_ACTS; i++) {
        usage(u, sizeof u, &table[i]);
        fprintf(f, "  %-22s %s\n", u, table[i].help);
    }
}

int act_pack(char out[][128], int n, int width)
{
    int lines = 0;
    size_t at = 0;
    width = width < 127 ? width : 127;
    for (int i = 0; i < N_ACTS && lines < n; i++) {
        char u[96];
        usage(u, sizeof u, &table[i]);
        if (at && at + 2 + strlen(u) > (size_t)width) {
            lines++;
            at = 0;
        }
        if (lines == n)
            break;
        at += (size_t)snprintf(out[lines] + at, 128 - at, "  %s", u);
    }
    return lines + (at > 0 && lines < n);
}

/* s with each '|' escaped, as a Markdown table cell needs */
static void cell(FILE *f, const char *s)
{
    for (; *s; s++)
        fputs(*s == '|' ? "\\|" : (char[2]){*s, 0}, f);
}

void act_markdown(FILE *f)
{
    char u[96];
    fputs("| commands | |\n|----------|--|\n", f);
    for (int i = 0; i < N_ACTS; i++) {
        usage(u, sizeof u, &table[i]);
        fputs("| `", f);
        cell(f, u);
        fputs("` | ", f);
        cell(f, table[i].doc ? table[i].doc : table[i].help);
        fputs(" |\n", f);
    }
}
