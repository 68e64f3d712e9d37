/* kvchat chat's own options (the model's and sampling's are app/options.c's) and its --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../options.h"
#include "../safe_text.h"
#include "chat_options.h"
#include "commands.h"
#include "sessions.h"

#define CHAT_OPTS_HELP                                                                             \
    "      --system TEXT      a system preamble opening each conversation in place of the\n"       \
    "                         template's (kept from eviction, as the preamble is: --keep)\n"       \
    "      --template T       gpt2 | dialogpt | none (default: dialogpt for a model whose\n"       \
    "                         config.json marks it conversational or whose name says DialoGPT,\n"  \
    "                         else gpt2)\n"                                                        \
    "      --keep K           tokens at the start never evicted (default: the template's "         \
    "preamble)\n"                                                                                  \
    "      --evict-min N      evict at least N tokens at a time (default: a quarter of --ctx)\n"   \
    "      --evict-at W       turn (default: make a turn's room, its message's and -n for the\n"   \
    "                         reply, before it starts, so no eviction falls inside a reply) |\n"   \
    "                         full (only when the next token does not fit)\n"                      \
    "      --evict M          exact (default: re-prefill what remains) | shift (approximate, "     \
    "what\n"                                                                                       \
    "                         llama.cpp does to GPT-2: old keys keep their old positions) |\n"     \
    "                         least-read (exact, the turns the replies read least go first;\n"     \
    "                         it turns --attention on)\n"                                          \
    "      --fidelity N       every N tokens, recompute the logits from scratch and report "       \
    "top-1\n"                                                                                      \
    "                         agreement and KL divergence as a fidelity event\n"                   \
    "      --idle-offload S   move conversations idle S seconds to host memory\n"                  \
    "      --prepare-evict on|off  make the next exact eviction while you type, so a reply "       \
    "never\n"                                                                                      \
    "                         stops for it (default on)\n"                                         \
    "      --attention on|off|N  attention events (the weight a reply's tokens give each turn)\n"  \
    "                         every N reply tokens (on: 16) and at its end; default on in the\n"   \
    "                         full-screen chat and with --events on the CPU, else off\n"           \
    "      --events FILE      write every cache and chat event to FILE, one JSON object a line;\n" \
    "                         a file that is not empty is refused (see --force); never a\n"        \
    "                         session, nor a file another kvchat is writing\n"                     \
    "      --session FILE     save the session to FILE as it happens (the TUI saves to\n"          \
    "                         ~/.local/share/kvchat/sessions/ by default); a session already in\n" \
    "                         FILE is continued, any other file is left alone (see --force)\n"     \
    "      --no-save          do not save the session\n"                                           \
    "      --save-cache       also keep the KV cache beside it (FILE.kv; with --draft, the\n"      \
    "                         drafters' in FILE.kv.draft), so resuming is a read\n"                \
    "      --resume FILE      continue a saved session (with its settings) and append to it;\n"    \
    "                         last: the newest one (kvchat sessions lists them)\n"                 \
    "      --force            resume even with a different model (its history is re-prefilled);\n" \
    "                         overwrite a --session FILE that is not a session, or an --events\n"  \
    "                         FILE that exists\n"

const char CHAT_HELP[] =
    "usage: kvchat [chat] [-m DIR] [options]               the full-screen chat\n"
    "       kvchat chat --no-tui [-m DIR] [options] < messages\n"
    "\n"
    "Chat with GPT-2 and watch its KV cache: the cache lives across turns (each turn processes "
    "only\n"
    "its new tokens); when the window fills, the oldest turns after the kept prefix are evicted "
    "and\n"
    "what remains is re-prefilled at its new positions, exactly. F1 in the chat lists keys and\n"
    "commands. Ctrl-C stops the reply being generated (what was generated stays).\n"
    "\n"
    "With --no-tui, or when stdin or stdout is not a terminal: reads one user message per line "
    "and\n"
    "writes each reply as one line (newlines inside it become spaces). Typed at a terminal, it\n"
    "prompts (you> on stderr). A line starting with / is a command, as in the full-screen chat\n"
    "(/help lists them; what they say goes to stderr); /quit ends the chat. In both, a line\n"
    "starting with \"\"\" opens a message over several lines, and one ending with \"\"\" closes "
    "it.\n"
    "\n"
    "      --no-tui           line mode\n"
    "      --commands         print the chat's commands as a Markdown table and "
    "exit\n" CHAT_OPTS_HELP DRAFT_OPTS_HELP
    "                         (in the chat each conversation has its drafter, whose cache the\n"
    "                         panel shows; it needs --attention off, its default with --draft)\n"
    "\n" MODEL_OPTS_HELP SAMPLING_OPTS_HELP CACHE_OPTS_HELP;

int chat_opt(chat_args *a, int argc, char **argv, int *i)
{
    const char *v = NULL;
    int r;
    engine_opts *eo = &a->eo;
#define MATCH(l) ((r = opt_match(argc, argv, i, NULL, l, &v)) != 0)
#define FLAG(l) opt_match(argc, argv, i, NULL, l, NULL)
    if (FLAG("--no-tui"))
        return a->no_tui = 1;
    if (FLAG("--commands"))
        return a->commands = 1;
    if (FLAG("--no-save"))
        return a->no_save = 1;
    if (FLAG("--save-cache"))
        return a->save_cache = 1;
    if (FLAG("--force"))
        return a->force = 1;
    if (MATCH("--system")) {
        /* as a message's: bytes that are not UTF-8 read as Latin-1 (the session is JSON, and a
         * string that is not UTF-8 failed its header's writing), and said; converted here, so that
         * a resume compares it as it will be recorded */
        static char *text;      /* lives for the run */
        static const char *raw; /* the options are read twice: converted and said once */
        int fixed = 0;
        if (r > 0 && (!raw || strcmp(raw, v))) {
            char *u = utf8_from_latin1(v, &fixed);
            if (!u)
                return -1;
            free(text);
            text = u;
            raw = v;
        }
        char said[160];
        if (fixed)
            fprintf(stderr, "kvchat: %s\n", latin1_said(said, sizeof said, "--system", fixed));
        eo->system = r > 0 ? text : NULL;
    } else if (MATCH("--template")) {
        if (r > 0 && tpl_parse(v, &eo->tpl))
            return -1;
        eo->tpl_why = "--template";
    } else if (MATCH("--keep")) {
        if (r > 0 && opt_int("--keep", v, 0, 65536, &eo->keep))
            return -1;
    } else if (MATCH("--evict-min")) {
        if (r > 0 && opt_int("--evict-min", v, 1, 65536, &eo->evict_min))
            return -1;
    } else if (MATCH("--evict-at")) {
        if (r > 0 && strcmp(v, "turn") && strcmp(v, "full"))
            return err_set("--evict-at: expected turn or full, got '%s'", v);
        if (r > 0)
            eo->evict_at = strcmp(v, "turn") ? WIN_AT_FULL : WIN_AT_TURN;
    } else if (MATCH("--evict")) {
        if (r > 0 && strcmp(v, "exact") && strcmp(v, "shift") && strcmp(v, "least-read"))
            return err_set("--evict: expected exact, shift or least-read, got '%s'", v);
        if (r > 0) {
            eo->evict = strcmp(v, "shift") ? EVICT_EXACT : EVICT_SHIFT;
            eo->policy = strcmp(v, "least-read") ? WIN_OLDEST : WIN_LEAST_READ;
        }
    } else if (MATCH("--fidelity")) {
        if (r > 0 && opt_int("--fidelity", v, 0, 1 << 20, &eo->fidelity))
            return -1;
    } else if (MATCH("--idle-offload")) {
        float f;
        if (r > 0 && opt_float("--idle-offload", v, 0, 1e9, &f))
            return -1;
        if (r > 0)
            eo->idle_offload = f;
    } else if (MATCH("--prepare-evict")) {
        if (r > 0 && strcmp(v, "on") && strcmp(v, "off"))
            return err_set("--prepare-evict: expected on or off, got '%s'", v);
        if (r > 0)
            eo->prepare = !strcmp(v, "on");
    } else if (MATCH("--attention")) {
        if (r > 0 && !strcmp(v, "on"))
            eo->attention = ENGINE_ATTENTION_EVERY;
        else if (r > 0 && !strcmp(v, "off"))
            eo->attention = 0;
        else if (r > 0 && opt_int("--attention", v, 1, 1 << 20, &eo->attention))
            return err_set("--attention: expected on, off or a number of tokens, got '%s'", v);
    } else if (MATCH("--events")) {
        a->events = v;
    } else if (MATCH("--session")) {
        a->session = v;
    } else if (MATCH("--resume")) {
        a->resume = v;
        if (r > 0 && !strcmp(v, "last")) { /* the newest saved session */
            if (sessions_latest(a->last, sizeof a->last))
                return -1;
            a->resume = a->last;
        }
    } else if ((r = draft_opts_parse(&eo->draft, argc, argv, i)) != 0) {
    } else {
        return 0;
    }
#undef MATCH
#undef FLAG
    return r < 0 ? -1 : 1;
}
