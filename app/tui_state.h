/* The full-screen chat's state, shared by its files (tui.c: the main loop, keys and commands;
 * tui_queue.c: what the generation thread sends it). Nothing else includes it. */
#ifndef KVCHAT_TUI_STATE_H
#define KVCHAT_TUI_STATE_H

#include <pthread.h>

#include "../ui/view.h"
#include "actions.h"
#include "block.h"
#include "tui.h"

typedef struct item {
    json_t *ev; /* an event, or NULL for reply text */
    int conv;
    char *text;
    struct item *next;
} item;

typedef struct {
    loaded_model *lm;
    engine *e;
    engine_opts eo;
    view v; /* the screen, the panes and the cache model */
    int conv, generating, quit, help, dirty;
    char *pending; /* a line entered while a reply was streaming */
    char status[256];
    double status_until;
    double quit_armed_until; /* a first Ctrl-C at the prompt: a second before this quits */
    double reply_ended;      /* when the last reply ended: a Ctrl-C just after was meant for it */
    pthread_mutex_t lock;
    item *head, *tail;
    const chat_persist *persist;
    json_t *all;     /* every event so far, for /save */
    msg_block block; /* a message typed over lines, between """ and """ */
    act_host host;   /* what the slash commands act on */
} tui;

/* the bus's and the engine's callbacks: an event, a reply's text (from the generation thread) */
void tui_on_event(void *ctx, json_t *ev);
void tui_on_text(void *ctx, int conv, const char *text, size_t len);
/* what the queue holds, applied to the panes and the cache model (the main loop's thread) */
void tui_drain(tui *t);

#endif
