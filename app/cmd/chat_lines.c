/* kvchat chat --no-tui (and chat whenever stdin or stdout is not a terminal): one message a line
 * on stdin, each reply on one line of stdout, the chat's slash commands through app/actions.c. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../actions.h"
#include "../block.h"
#include "../lines.h"
#include "../options.h"
#include "../safe_text.h"
#include "../session/snapshot.h"
#include "chat.h"

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

/* line mode's /save: every event so far, added from the engine's threads */
typedef struct {
    json_t *all;
    pthread_mutex_t lock;
    /* the run's figures, said when line mode ends at a terminal (as llama-cli says its timings) */
    long long prompt_tok, reply_tok;
    double prompt_ms, reply_ms;
    int turns, evictions;
    int cut; /* the last turn_end's: a Ctrl-C stopped its reply */
} collector;

/* what the chat says goes to stderr as visible text: it may quote a recorded session */
static void say_line(const char *text, size_t len)
{
    safe_fwrite(stderr, text, len, 0);
    fputc('\n', stderr);
}

/* collects, and says each notice (a message cut to fit, a byte read as Latin-1) as the TUI shows
 * it in the pane */
static void collect(void *ctx, json_t *ev)
{
    collector *c = ctx;
    pthread_mutex_lock(&c->lock);
    json_array_append(c->all, ev);
    ev_kind k = ev_kind_of(ev);
    switch (k) {
        case EVK_PREFILL:
            c->prompt_tok += (long long)json_array_size(ev_prefill_ids(ev));
            c->prompt_ms += ev_prefill_ms(ev);
            break;
        case EVK_TOKEN:
            c->reply_tok++;
            c->reply_ms += ev_token_ms(ev);
            break;
        case EVK_TURN_END:
            c->turns++;
            c->cut = ev_turn_end_cancelled(ev);
            break;
        case EVK_EVICT: c->evictions++; break;
        default: break;
    }
    pthread_mutex_unlock(&c->lock);
    if (k == EVK_NOTICE && ev_notice_text(ev)) {
        fputs("kvchat: ", stderr);
        say_line(ev_notice_text(ev), ev_notice_text_len(ev));
    }
}

static void line_say(act_host *h, const char *text)
{
    (void)h;
    say_line(text, strlen(text));
}

/* a message that did not go in (no room in the window, say): said, and the chat reads on, as the
 * full-screen chat does; the run's exit status says that some failed (*failed counts them) */
static void turn_failed(int *failed)
{
    putchar('\n');
    fflush(stdout);
    fputs("kvchat: ", stderr);
    line_say(NULL, err_msg());
    ++*failed;
}

/* Ctrl-Z in the line mode: time stopped is no reply's time (its tok/s), as in the full-screen
 * chat */
static void on_tstp(int sig)
{
    (void)sig;
    int saved = errno;
    ev_clock_stop_process();
    errno = saved;
}

/* messages until the input ends or /quit: the exit status */
static int converse(act_host *host, loaded_model *lm, const chat_persist *persist,
                    const session_writer *sw, collector *col)
{
    engine *e = host->e;
    int rc = 0, raw = !isatty(STDOUT_FILENO), failed = 0;
    session_emit_model(lm);
    engine_on_text(e, print_text, &raw);
    running_engine = e;
    /* no SA_RESTART, and the wait for input polls the flag: Ctrl-C is seen while idle, too */
    struct sigaction sa = {.sa_handler = on_sigint}, old_sa, tstp = {.sa_handler = on_tstp},
                     old_tstp;
    tstp.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_sa);
    sigaction(SIGTSTP, &tstp, &old_tstp);
    line_reader in = {0};
    msg_block block = {0}; /* a message typed over lines, between """ and """ */
    char *line;
    /* typed at a terminal: a prompt, /quit is a command, and Ctrl-C twice quits, as in the
     * full-screen chat; piped input ends at a Ctrl-C */
    int typed = isatty(STDIN_FILENO);
    double quit_armed_until = 0;
    if (typed)
        fputs("kvchat: type a message and Enter; /help lists the commands, /quit or Ctrl-D "
              "ends\n",
              stderr);
    while (!rc) {
        if (typed) {
            fputs(block.open ? "...> " : "you> ", stderr);
            fflush(stderr);
        }
        int got = lines_next(&in, &interrupted, &line);
        if (got == LINES_STOPPED) {
            interrupted = 0;
            if (typed && ev_clock() >= quit_armed_until) {
                quit_armed_until = ev_clock() + 3;
                fputs("\n(Ctrl-C again to quit, or /quit)\n", stderr);
                continue;
            }
            if (!typed) {
                fputs("kvchat: interrupted while waiting for input: the run ends, turns saved\n",
                      stderr);
                rc = 130;
            }
            break;
        }
        if (got != LINES_LINE) {
            rc = got == LINES_ERROR ? EXIT_RUNTIME : 0;
            if (got == LINES_END && block.open) {
                err_set("the input ended inside a \"\"\" block: that message was not sent (end "
                        "it with a line ending in \"\"\")");
                rc = EXIT_RUNTIME;
            }
            break;
        }
        size_t n = strlen(line);
        while (n > 0 && line[n - 1] == '\r')
            line[--n] = 0;
        if (!n && !block.open)
            continue;
        char *whole = NULL; /* a block's message, when this line closed one */
        int b = block_feed(&block, line, &whole);
        if (b < 0)
            fprintf(stderr, "kvchat: %s\n", err_msg());
        if (b < 0 || b == BLOCK_MORE || (b == BLOCK_DONE && !*whole)) {
            free(whole);
            continue;
        }
        if (!whole && line[0] == '/') {
            act_result ar = act_run(host, line);
            if (ar == ACT_QUIT)
                break;
            if (ar == ACT_HELP)
                act_help(stderr);
            if (ar != ACT_REPLY)
                continue;
        } else if (engine_turn_start(e, host->conv, whole ? whole : line)) {
            free(whole);
            turn_failed(&failed);
            continue;
        }
        free(whole);
        char *reply = NULL;
        if (engine_turn_wait(e, &reply)) {
            turn_failed(&failed);
            continue;
        }
        free(reply);
        putchar('\n');
        fflush(stdout);
        if (sw->failed)
            break; /* cmd_chat reports it, with the exit status */
        if (persist->kv_path &&
            snapshot_follow(persist->kv_path, persist->save_cache, e, lm, persist->fingerprint)) {
            rc = EXIT_RUNTIME;
            break;
        }
        /* a Ctrl-C that stopped this reply stops nothing more; one that came after the reply had
         * ended (while it was being saved, say) is the next wait's, or it would be lost */
        pthread_mutex_lock(&col->lock);
        if (col->cut)
            interrupted = 0;
        pthread_mutex_unlock(&col->lock);
    }
    lines_free(&in);
    block_free(&block);
    if (!rc && failed) {
        err_said();
        rc = EXIT_RUNTIME;
    }
    sigaction(SIGINT, &old_sa, NULL);
    sigaction(SIGTSTP, &old_tstp, NULL);
    running_engine = NULL;
    return rc;
}

int chat_lines(engine *e, loaded_model *lm, const engine_opts *eo, const chat_persist *persist,
               int conv, const session_writer *sw)
{
    collector col = {.all = json_array()};
    pthread_mutex_init(&col.lock, NULL);
    if (!col.all || ev_subscribe(lm->bus, collect, &col)) {
        json_decref(col.all);
        pthread_mutex_destroy(&col.lock);
        return EXIT_RUNTIME;
    }
    const session *hist = persist->history;
    for (int i = 0; hist && i < hist->n_events; i++) /* /save's events: the history's first */
        if (ev_kind_of(hist->events[i]) != EVK_MODEL)
            json_array_append(col.all, hist->events[i]);
    if (persist->resumed) /* then what resuming it did */
        json_array_extend(col.all, (json_t *)persist->resumed);
    int rc = conv < 0 && (conv = engine_new_conv(e)) < 0 ? EXIT_RUNTIME : 0;
    act_host host = {.e = e,
                     .lm = lm,
                     .eo = eo,
                     .persist = persist,
                     .events = col.all,
                     .events_lock = &col.lock,
                     .conv = conv,
                     .say = line_say,
                     .note = line_say};
    if (!rc)
        rc = converse(&host, lm, persist, sw, &col);
    /* under the bus's lock: no sink call is under way once it returns */
    ev_unsubscribe(lm->bus, collect, &col);
    if (isatty(STDERR_FILENO) && col.turns)
        fprintf(stderr,
                "kvchat: %d turn%s: prompt %lld tok at %.1f tok/s, replies %lld tok at %.1f tok/s, "
                "%d eviction%s\n",
                col.turns, col.turns == 1 ? "" : "s", col.prompt_tok,
                col.prompt_ms > 0 ? col.prompt_tok * 1e3 / col.prompt_ms : 0.0, col.reply_tok,
                col.reply_ms > 0 ? col.reply_tok * 1e3 / col.reply_ms : 0.0, col.evictions,
                col.evictions == 1 ? "" : "s");
    json_decref(col.all);
    pthread_mutex_destroy(&col.lock);
    return rc;
}
