/* kvchat replay: a saved session played back (the TUI with its cache panel, at the recorded pace),
 * printed as a transcript, or verified by running the model again on the recorded inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "commands.h"
#include "../actions.h"
#include "../chat/engine.h"
#include "../files.h"
#include "../options.h"
#include "../session/fingerprint.h"
#include "../safe_text.h"
#include "../session/session.h"
#include "../session/restore.h"
#include "replay.h"
#include "sessions.h"
#include "../selftest.h"

const char REPLAY_HELP[] =
    "usage: kvchat replay FILE|last [--idle-limit S]  play the session back with the cache panel\n"
    "       kvchat replay                      list the saved sessions (kvchat sessions)\n"
    "       kvchat replay FILE --no-tui        print the transcript\n"
    "       kvchat replay FILE --verify [-m DIR] [--device D] [--force] [--dump-logits OUT]\n"
    "                                 [--draft D]\n"
    "       kvchat replay --events-table       print the events a session holds, as a table\n"
    "\n"
    "Replay needs no model: the tokens stream with their recorded timing and the panel shows the\n"
    "recorded cache events. Keys: space pause, + / - speed (0.25x to 64x, then max), . one token,\n"
    "] / [ next / previous turn, 1-9 show that conversation, F1 help, q quit. --idle-limit S\n"
    "(default 3) plays a pause longer than S seconds (between messages, say) as S, as\n"
    "asciinema's -i does; 0 plays every pause as recorded.\n"
    "--verify re-runs the model on the recorded inputs and settings and reports, turn by turn,\n"
    "whether the same tokens come out; exit 0 when all do, 1 at the first divergence (its token "
    "and\n"
    "position). The model is the one the session names, or -m DIR (--force: another model);\n"
    "the drafter the one it names, or --draft D (a moved folder; off: none, which changes no\n"
    "greedy reply).\n"
    "--dump-logits OUT is teacher forcing: every reply is fed its recorded tokens, and OUT gets "
    "the\n"
    "logits each was taken from (vocab little-endian float32s a token), evictions and offloads\n"
    "included: run on two devices, the files compare them at every step.\n";

/* ---- transcript ---- */

/* what the transcript says of an event that is not a message or a reply, or NULL */
static const char *mark(const json_t *ev, char *buf, size_t n)
{
    switch (ev_kind_of(ev)) {
        case EVK_RETRY: return "(retry: the last reply, generated again)";
        case EVK_EDIT: return "(edit: the last message and its reply, replaced)";
        case EVK_CLEAR: return "(clear: every turn dropped)";
        case EVK_FORK:
            if (!ev_fork_made_conv(ev))
                return NULL;
            snprintf(buf, n, "(forked from conv %d)", ev_fork_parent(ev));
            return buf;
        case EVK_TURN_END:
            return ev_turn_end_cancelled(ev) ? "(stopped with Ctrl-C: the reply ends there)"
                   : ev_turn_end_failed(ev)  ? "(failed: the turn ended with an error)"
                                             : NULL;
        default: return NULL;
    }
}

static int transcript(const session *s, const char *path)
{
    int raw = !isatty(STDOUT_FILENO), n = 0;
    char buf[64];
    for (int i = 0; i < s->n_events; i++) {
        const json_t *ev = s->events[i];
        int conv = ev_conv(ev);
        ev_kind k = ev_kind_of(ev);
        if (k == EVK_RESUME)
            printf("(resumed: a later run went on from here)\n");
        if (k == EVK_USER || (k == EVK_TURN_END && ev_turn_end_reply(ev))) {
            printf("[conv %d] %s: ", conv, k == EVK_USER ? "you" : "gpt-2");
            if (k == EVK_USER)
                safe_fwrite(stdout, ev_user_text(ev), ev_user_text_len(ev), raw);
            else
                safe_fwrite(stdout, ev_turn_end_reply(ev), ev_turn_end_reply_len(ev), raw);
            putchar('\n');
        }
        const char *m = mark(ev, buf, sizeof buf);
        if (m)
            printf("[conv %d] %s\n", conv, m);
        n += k == EVK_TURN_END;
    }
    if (s->truncated)
        fprintf(
            stderr,
            "kvchat replay: %s was cut after line %d (a crash mid-turn): %d complete turns shown\n",
            path, s->lines - 1, n);
    return 0;
}

/* ---- verify ---- */

int cmd_replay(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    const char *path = NULL;
    int no_tui = 0, check = 0, force = 0;
    float idle = 3;
    const char *dump = NULL, *idle_s = NULL, *draft = NULL;
    for (int i = 1; i < argc; i++) {
        int r;
        if (opt_match(argc, argv, &i, NULL, "--events-table", NULL)) {
            ev_print_table(stdout); /* model/README.md's, from model/event_schema.h */
            return 0;
        } else if (opt_match(argc, argv, &i, NULL, "--no-tui", NULL))
            no_tui = 1;
        else if (opt_match(argc, argv, &i, NULL, "--verify", NULL))
            check = 1;
        else if (opt_match(argc, argv, &i, NULL, "--force", NULL))
            force = 1;
        else if ((r = opt_match(argc, argv, &i, NULL, "--dump-logits", &dump)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--draft", &draft)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--idle-limit", &idle_s)) != 0) {
            if (r < 0 || opt_float("--idle-limit", idle_s, 0, 86400, &idle))
                return EXIT_USAGE;
        } else if ((r = model_opts_parse(&mo, argc, argv, &i)) != 0) {
            if (r < 0)
                return EXIT_USAGE;
        } else if (argv[i][0] == '-' && argv[i][1])
            return err_set("unknown option '%s' (see kvchat replay --help)", argv[i]), EXIT_USAGE;
        else if (path)
            return err_set("one session file at a time (got '%s' and '%s')", path, argv[i]),
                   EXIT_USAGE;
        else
            path = argv[i];
    }
    char latest[4096];
    if (path && !strcmp(path, "last")) { /* the newest saved session, as chat --resume last */
        if (sessions_latest(latest, sizeof latest))
            return EXIT_RUNTIME;
        path = latest;
    }
    if (!path) { /* which one? the saved ones, to choose from */
        if (check || no_tui || dump)
            return err_set("which session file? (kvchat sessions lists them)"), EXIT_USAGE;
        return sessions_print(20) ? EXIT_RUNTIME : 0;
    }
    if (dump && !check)
        return err_set("--dump-logits goes with --verify (it records the verifying run)"),
               EXIT_USAGE;
    if (draft && !check)
        return err_set("--draft goes with --verify (the drafter it runs with)"), EXIT_USAGE;
    draft_opts named; /* checked now; each verify run applies it over the recorded one */
    if (draft && draft_parse(draft, &named))
        return EXIT_USAGE;
    session s;
    if (session_read(&s, path))
        return EXIT_RUNTIME;
    int rc;
    if (check)
        rc = replay_verify(&s, path, &mo, force, dump, draft, argc, argv);
    else if (no_tui || !isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
        rc = transcript(&s, path);
    else
        rc = replay_play(&s, path, idle);
    session_free(&s);
    return rc;
}
