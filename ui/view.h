/* What the full-screen chat and replay both show: the screen, a chat pane per conversation, the
 * cache model the events build and the panel drawn from it, and a status line. The front ends in
 * app/ draw through it and make no ncurses call of their own. */
#ifndef KVCHAT_UI_VIEW_H
#define KVCHAT_UI_VIEW_H

#include "cache_model.h"
#include "chat_pane.h"
#include "screen.h"

typedef struct {
    screen scr;
    cache_model cm;
    chat_pane panes[CHAT_PANES + 1]; /* [0]: every conversation past CHAT_PANES */
    int log_rows;                    /* the panel's event log at the last draw (0: no room) */
} view;

/* empty panes and model; then the terminal taken (screen_open: 0, or -1 with the error) until
 * view_close; view_free frees the panes and model */
void view_init(view *v);
int view_open(view *v);
void view_close(view *v);
void view_free(view *v);
/* the panes and the cache model emptied (replay going back) */
void view_clear(view *v);
chat_pane *view_pane(view *v, int conv);
/* an event into the cache model and the pane of its conversation */
void view_apply(view *v, const json_t *ev);
/* conv's chat pane (under a banner line, or none; a footer after its messages, or none), the panel
 * and the status line, drawn but not yet on the terminal */
void view_draw(view *v, int conv, const char *banner, const char *footer, const char *status);
/* what is drawn onto the terminal, the input line left empty (replay has none) */
void view_update(view *v);

enum { VIEW_NONE = -1, VIEW_F1 = -2, VIEW_RESIZED = -3 };
/* The next key of a front end without line editing (replay): a byte, VIEW_NONE after 50 ms without
 * one, VIEW_F1, or VIEW_RESIZED when the terminal changed size or came back after Ctrl-Z (the
 * windows are rebuilt: draw again). */
int view_key(view *v);

#endif
