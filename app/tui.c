/* The TUI main loop. The generation thread never waits on the screen: events and reply text go into
 * a queue that this loop drains, applies to the widgets' state and draws at most ~20 times a
 * second. */
#include "tui_state.h"

#include <locale.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/clamp.h"
#include "../kernels/err.h"
#include "../model/events.h"
#include "../ui/input.h"
#include "../ui/view.h"
#include "actions.h"
#include "tui_help.h"
#include "block.h"
#include "files.h"
#include "options.h"
#include "session/session.h"
#include "session/snapshot.h"

_Static_assert(INPUT_MAX_BYTES == ENGINE_MAX_MESSAGE,
               "the input line holds exactly what a turn takes");

/* a Ctrl-C this soon after a reply ended was pressed to stop it: the chat goes on */
#define REPLY_GRACE_S 1.5

static void say(tui *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(tui *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->status, sizeof t->status, fmt, ap);
    va_end(ap);
    t->status_until = ev_clock() + 6;
    t->dirty = 1;
}

static void draw(tui *t)
{
    const model_opts *mo = engine_model_opts(t->e);
    char banner[320] = "", footer[1024] = "";
    if (t->block.open) { /* a message typed over lines: its last lines so far, after the chat */
        const char *text = t->block.buf ? t->block.buf : "", *from = text;
        if (t->block.len > 640) { /* from a line's start */
            from = text + t->block.len - 640;
            from = strchr(from, '\n') ? strchr(from, '\n') + 1 : from;
        }
        snprintf(footer, sizeof footer,
                 "%s%s%s(%d line%s: \"\"\" at a line's end sends it, "
                 "Ctrl-C drops it)",
                 from > text ? "...\n" : "", from, t->block.lines ? "\n" : "", t->block.lines,
                 t->block.lines == 1 ? "" : "s");
    }
    if (t->lm->model.cfg.random_weights)
        snprintf(banner, sizeof banner,
                 "RANDOM WEIGHTS (demo): the text is noise; the cache, speeds and sizes are real");
    else if (t->lm->model.cfg.about[0]) /* the file's words, drawn as text (the pane's ui_draw) */
        snprintf(banner, sizeof banner, "%s", t->lm->model.cfg.about);
    char gen[48] = ""; /* while a reply streams: how fast, live */
    const cm_conv *cc = cm_conv_get(&t->v.cm, t->conv);
    if (t->generating && cc && cc->decode_tokens && !cc->awaiting_first)
        snprintf(gen, sizeof gen, "  generating %.0f tok/s",
                 cc->decode_tok_s); /* whole: it moves less, costs fewer redraws */
    else if (t->generating)
        snprintf(gen, sizeof gen, "  generating...");
    char status[512];
    int message = t->status[0] && ev_clock() < t->status_until;
    if (t->generating) /* the reply's state first, a command's message beside it */
        snprintf(status, sizeof status, "%s  Ctrl-C stop%s%s", gen + 2, message ? "  |  " : "",
                 message ? t->status : "");
    else if (message)
        snprintf(status, sizeof status, "%s", t->status);
    else {
        /* the keys stay in view, as htop's bottom bar keeps them; on a narrower screen, in
         * turn: "/quit" (F1 lists it), the F-keys but F1, the model's and backend's names */
        static const struct {
            int names, bar, quit;
        } fit[] = {{1, 1, 1}, {1, 1, 0}, {1, 0, 1}, {0, 0, 1}, {0, 0, 0}};
        int room = t->v.scr.layout.status.w - 2, w = 0;
        for (size_t k = 0; k < sizeof fit / sizeof fit[0]; k++) {
            w = !fit[k].names ? 0
                              : snprintf(status, sizeof status, "%s  %s  ", t->v.cm.model,
                                         t->lm->backend->name);
            w += snprintf(status + w, sizeof status - (size_t)w,
                          "conv %d/%d  temp %.2g top-k %d top-p %.2g  n %d  %s  "
                          "Ctrl-C twice: quit%s",
                          t->conv, engine_conv_count(t->e), mo->sp.temp, mo->sp.top_k, mo->sp.top_p,
                          mo->n_predict,
                          fit[k].bar ? "F1 help  F2 panel  F5 log  F6 convs" : "F1 help",
                          fit[k].quit ? "  /quit" : "");
            if (w <= room)
                break;
        }
    }
    cm_tick(&t->v.cm, ev_now(t->lm->bus));
    view_draw(&t->v, t->conv, banner[0] ? banner : NULL, footer[0] ? footer : NULL, status);
    if (t->help)
        tui_help_draw(t->v.scr.layout.status.w);
    input_redraw();
    t->dirty = 0;
}

static int start_turn(tui *t, const char *line)
{
    chat_pane_add(view_pane(&t->v, t->conv), ROLE_USER, line, strlen(line));
    chat_pane_add(view_pane(&t->v, t->conv), ROLE_ASSISTANT, "", 0);
    view_pane(&t->v, t->conv)->scroll = 0;
    if (engine_turn_start(t->e, t->conv, line)) {
        say(t, "%s", err_msg());
        return -1;
    }
    t->generating = 1;
    t->status_until = 0; /* what was said before this message was about what came before it */
    t->dirty = 1;
    return 0;
}

static void finish_turn(tui *t)
{
    char *reply = NULL;
    int failed = engine_turn_wait(t->e, &reply);
    free(reply);
    t->generating = 0;
    t->reply_ended = ev_clock();
    tui_drain(t);
    if (failed) {
        chat_msg *r = chat_pane_reply(view_pane(&t->v, t->conv));
        if (r &&
            !r->len) /* the message never went in: it leaves the pane as it left the conversation */
            chat_pane_drop_turn(view_pane(&t->v, t->conv));
        say(t, "error: %s", err_msg());
    }
    if (t->persist->kv_path && snapshot_follow(t->persist->kv_path, t->persist->save_cache, t->e,
                                               t->lm, t->persist->fingerprint))
        say(t, "%s", err_msg());
    if (t->pending) {
        char *line = t->pending;
        t->pending = NULL;
        start_turn(t, line);
        free(line);
    }
}

static int switch_to(tui *t, int conv)
{
    for (int i = 0; i < engine_conv_count(t->e); i++)
        if (engine_conv_id(t->e, i) == conv) {
            t->conv = conv;
            t->status_until = 0; /* what was said was about the conversation left behind */
            t->dirty = 1;
            return 0;
        }
    say(t, "no conversation %d", conv);
    return -1;
}

static void cycle(tui *t, int dir)
{
    int n = engine_conv_count(t->e), at = 0;
    for (int i = 0; i < n; i++)
        if (engine_conv_id(t->e, i) == t->conv)
            at = i;
    switch_to(t, engine_conv_id(t->e, (at + dir + n) % n));
}

static tui *host_tui(act_host *h) { return h->ctx; }
static void host_say(act_host *h, const char *line) { say(host_tui(h), "%s", line); }

static void host_note(act_host *h, const char *text)
{
    tui *t = host_tui(h);
    chat_pane_add(view_pane(&t->v, t->conv), ROLE_NOTICE, text, strlen(text));
}

static void host_switched(act_host *h)
{
    tui *t = host_tui(h);
    t->conv = h->conv;
    t->status_until = 0; /* what was said was about the conversation left behind */
    t->dirty = 1;
}

static void host_forked(act_host *h, int parent, int child)
{
    chat_pane *from = view_pane(&host_tui(h)->v, parent), *to = view_pane(&host_tui(h)->v, child);
    for (int i = 0; i < from->n; i++)
        chat_pane_add(to, from->msgs[i].role, from->msgs[i].text ? from->msgs[i].text : "",
                      from->msgs[i].len);
}

static void host_edited(act_host *h, const char *text)
{
    chat_pane *p = view_pane(&host_tui(h)->v, h->conv);
    chat_pane_drop_turn(p); /* the message and its reply give way to the edited one */
    chat_pane_add(p, ROLE_USER, text, strlen(text));
    chat_pane_add(p, ROLE_ASSISTANT, "", 0);
    p->scroll = 0;
}

static void host_retrying(act_host *h)
{
    chat_pane *p = view_pane(&host_tui(h)->v, h->conv);
    if (chat_pane_restart_reply(p))
        chat_pane_add(p, ROLE_ASSISTANT, "", 0);
}

static void host_cleared(act_host *h) { chat_pane_free(view_pane(&host_tui(h)->v, h->conv)); }

static void command(tui *t, char *line)
{
    t->host.conv = t->conv;
    switch (act_run(&t->host, line)) {
        case ACT_QUIT: t->quit = 1; break;
        case ACT_HELP: t->help = 1; break;
        case ACT_REPLY: t->generating = 1; break;
        case ACT_DONE: break;
    }
    t->dirty = 1;
}

static void on_entered(tui *t, char *line)
{
    char *whole = NULL; /* a block's message, when this line closed one */
    int b = block_feed(&t->block, line, &whole);
    input_set_prompt(t->block.open ? "... " : "> ");
    if (b != BLOCK_LINE) {
        if (b < 0)
            say(t, "%s", err_msg());
        if (b == BLOCK_MORE && !strncmp(line, "\"\"\"", 3))
            say(t, "a message over several lines: end it with \"\"\"");
        free(line);
        if (!whole)
            return; /* nothing to send yet */
        line = whole;
    }
    if (b == BLOCK_LINE && line[0] == '/') {
        command(t, line);
    } else if (!line[0]) {
        /* nothing */
    } else if (t->generating) {
        free(t->pending);
        t->pending = strdup(line);
        say(t, "queued: it is sent when this reply ends");
    } else {
        start_turn(t, line);
    }
    free(line);
}

/* a resumed session: its messages in the panes and its events in the panel, as they were */
static void show_history(tui *t, const session *h)
{
    for (int i = 0; i < h->n_events; i++) {
        json_t *ev = h->events[i];
        if (ev_kind_of(ev) == EVK_MODEL)
            continue; /* this run's model event describes the model now */
        cm_apply(&t->v.cm, ev);
        json_array_append(t->all, ev);
        chat_pane_apply(view_pane(&t->v, ev_conv(ev)), ev, &t->v.cm);
    }
    if (t->persist->resumed) /* /save's events: then what resuming it did */
        json_array_extend(t->all, (json_t *)t->persist->resumed);
    const char *note = "resumed: the history above was restored";
    chat_pane_add(view_pane(&t->v, t->conv), ROLE_NOTICE, note, strlen(note));
}

static void history_path(char *buf, size_t n)
{
    if (xdg_path(buf, n, "XDG_STATE_HOME", ".local/state", "history", "no input history is kept"))
        buf[0] = 0; /* no history file */
}

int tui_run(loaded_model *lm, engine *e, const engine_opts *eo, const chat_persist *persist)
{
    tui *t = calloc(1, sizeof *t);
    if (!t)
        return err_set("out of memory"), EXIT_RUNTIME;
    t->lm = lm;
    t->e = e;
    t->eo = *eo;
    t->persist = persist;
    t->all = json_array();
    pthread_mutex_init(&t->lock, NULL);
    t->host = (act_host){.e = e,
                         .lm = lm,
                         .eo = &t->eo,
                         .persist = persist,
                         .events = t->all,
                         .ctx = t,
                         .say = host_say,
                         .note = host_note,
                         .switched = host_switched,
                         .forked = host_forked,
                         .edited = host_edited,
                         .retrying = host_retrying,
                         .cleared = host_cleared};
    view_init(&t->v);
    setlocale(LC_ALL, "");
    if (ev_subscribe(lm->bus, tui_on_event, t)) {
        free(t);
        return EXIT_RUNTIME;
    }
    engine_on_text(e, tui_on_text, t);
    session_emit_model(lm);
    t->conv =
        engine_conv_count(e) ? engine_conv_id(e, engine_conv_count(e) - 1) : engine_new_conv(e);
    if (persist->history)
        show_history(t, persist->history);
    if (persist->session_path) {
        char note[PATH_MAX + 64];
        snprintf(note, sizeof note, "saving this session to %s", persist->session_path);
        chat_pane_add_notice(view_pane(&t->v, t->conv), note, strlen(note), 0);
    }
    if (t->conv < 0 || view_open(&t->v)) {
        view_free(&t->v);
        free(t);
        return EXIT_RUNTIME;
    }
    char hist[PATH_MAX];
    history_path(hist, sizeof hist);
    input_open(t->v.scr.input, "> ", hist[0] ? hist : NULL);
    tui_drain(t);
    draw(t);
    double last_draw = ev_clock();
    while (!t->quit) {
        int k = input_poll(1);
        if (t->help && k != IN_NONE && k != IN_RESIZE) {
            /* any key closes the help and then does what it does (a letter typed is not lost);
             * F1 only closes it */
            t->help = 0;
            t->dirty = 1;
            if (k == IN_HELP)
                k = IN_NONE;
        }
        switch (k) {
            case IN_INTERRUPT:
                if (t->generating) {
                    engine_cancel(e);
                    say(t, "stopped: the reply so far stays in the conversation");
                } else if (input_clear()) { /* as in bash: the typed line goes, nothing else */
                } else if (t->block.open) { /* as bash and python drop a continuation */
                    say(t, "dropped the unfinished message of %d line%s", t->block.lines,
                        t->block.lines == 1 ? "" : "s");
                    block_free(&t->block);
                    input_set_prompt("> ");
                } else if (ev_clock() - t->reply_ended < REPLY_GRACE_S) {
                    /* meant for the reply that had just ended: it neither quits nor arms */
                    say(t, "the reply had already ended (Ctrl-C twice quits)");
                } else if (ev_clock() < t->quit_armed_until) {
                    t->quit = 1;
                } else { /* a late press meant for the reply that just ended must not end the chat
                          */
                    t->quit_armed_until = ev_clock() + 3;
                    say(t, "press Ctrl-C again to quit (or /quit)");
                    t->status_until = t->quit_armed_until; /* no longer true after that */
                }
                break;
            case IN_EOF: t->quit = 1; break;
            case IN_LINE: on_entered(t, input_take_line()); break;
            case IN_NEW_CONV:
                if (t->generating)
                    say(t, "wait for the reply to finish (Ctrl-C stops it)");
                else
                    command(t, (char[]){"/new"});
                break;
            case IN_PREV_CONV:
            case IN_NEXT_CONV: cycle(t, k == IN_NEXT_CONV ? 1 : -1); break;
            case IN_PAGE_UP:
            case IN_PAGE_DOWN:
                chat_pane_scroll(view_pane(&t->v, t->conv),
                                 (k == IN_PAGE_UP ? 1 : -1) * (t->v.scr.layout.chat.h - 2));
                t->dirty = 1;
                break;
            case IN_WHEEL_UP:
            case IN_WHEEL_DOWN:
                chat_pane_scroll(view_pane(&t->v, t->conv), k == IN_WHEEL_UP ? 3 : -3);
                t->dirty = 1;
                break;
            case IN_HELP:
                t->help = 1;
                t->dirty = 1;
                break;
            case IN_PASTE_CUT:
                say(t, "the paste was cut at %d KiB, the most a message can hold",
                    INPUT_MAX_BYTES / 1024);
                break;
            case IN_PANEL: /* F2: the panel hidden, or back as it was */
            case IN_WIDEN: /* F3: the panel wide, or back to normal */
                t->v.scr.panel_mode =
                    k == IN_PANEL
                        ? (t->v.scr.panel_mode == PANEL_HIDDEN ? PANEL_NORMAL : PANEL_HIDDEN)
                        : (t->v.scr.panel_mode == PANEL_WIDE ? PANEL_NORMAL : PANEL_WIDE);
                __attribute__((fallthrough)); /* the windows are laid out again */
            case IN_RESIZE:
                screen_relayout(&t->v.scr);
                input_set_window(t->v.scr.input);
                t->dirty = 1;
                break;
            case IN_LOG_FILTER: { /* F5: all, evictions only, this conversation's */
                static const char *const what[] = {"every event", "evictions only",
                                                   "this conversation's"};
                t->v.scr.log_filter = (t->v.scr.log_filter + 1) % 3;
                t->v.scr.log_scroll = 0;
                say(t, "panel log: %s%s", what[t->v.scr.log_filter],
                    t->v.log_rows > 0 ? " (F5: the next)" : " (no room for it here: F3 widens)");
                t->dirty = 1;
                break;
            }
            case IN_LOG_UP: /* Shift-Up / Shift-Down: the log scrolled back and forward */
            case IN_LOG_DOWN:
                t->v.scr.log_scroll += k == IN_LOG_UP ? 1 : -1;
                t->v.scr.log_scroll = clamp_int(t->v.scr.log_scroll, 0, CM_LOG_LINES);
                t->dirty = 1;
                break;
            case IN_CONV_VIEW: /* F6: the conversations listed, or one's map and graph again */
                t->v.scr.conv_view = !t->v.scr.conv_view;
                t->dirty = 1;
                break;
            case IN_DRAFT_MARKS: /* F7 */
                t->v.scr.draft_marks = !t->v.scr.draft_marks;
                say(t, "%s",
                    t->eo.draft.kind == DRAFT_NONE ? "no drafter: --draft marks the "
                                                     "tokens it proposes"
                    : t->v.scr.draft_marks         ? "drafted tokens underlined (F7: off)"
                                                   : "drafted tokens not marked (F7: on)");
                t->dirty = 1;
                break;
            case IN_MOUSE: /* F4 */
                screen_mouse(&t->v.scr, !t->v.scr.mouse);
                say(t, t->v.scr.mouse ? "mouse on: the wheel scrolls (F4: off, to select text)"
                                      : "mouse off: select text to copy as the terminal does (F4: "
                                        "the wheel back)");
                break;
            default: break;
        }
        if (t->generating && engine_turn_done(e))
            finish_turn(t);
        tui_drain(t);
        if (t->status[0] && ev_clock() >= t->status_until) {
            t->status[0] = 0;
            t->dirty = 1;
        }
        if (t->v.scr.conv_view && ev_clock() - last_draw >= 1) /* F6's "used" ages */
            t->dirty = 1;
        if (t->dirty && ev_clock() - last_draw >= 0.045) {
            draw(t);
            last_draw = ev_clock();
        }
    }
    if (t->generating) {
        engine_cancel(e);
        finish_turn(t);
    }
    input_close();
    view_close(&t->v);
    engine_on_text(e, NULL, NULL);
    ev_unsubscribe(lm->bus, tui_on_event, t);
    view_free(&t->v);
    block_free(&t->block);
    free(t->pending);
    json_decref(t->all);
    item *it = t->head;
    while (it) {
        item *next = it->next;
        json_decref(it->ev);
        free(it->text);
        free(it);
        it = next;
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
    return 0;
}
