/* The conversation as the user reads it: messages by role, wrapped to the pane (wide characters
 * measured), scrollable, following the end while a reply streams in. */
#ifndef KVCHAT_UI_CHAT_PANE_H
#define KVCHAT_UI_CHAT_PANE_H

#include <jansson.h>
#include <stddef.h>

#include "../model/window.h"
#include "cache_model.h"
#include "screen.h"

/* conversations 1..CHAT_PANES get a pane of their own (the full-screen chat and replay); others
 * share one */
enum { CHAT_PANES = 64 };

typedef struct {
    int role; /* ROLE_USER, ROLE_ASSISTANT or ROLE_NOTICE */
    char *text;
    size_t len, cap;
    unsigned char *drafted; /* a reply's: per byte of its tokens' text, 1 where a drafter proposed
                               the token (--draft) */
    size_t n_marks, cap_marks;
    size_t cut; /* a message's: the bytes of its beginning that were cut to fit the window */
} chat_msg;

typedef struct {
    chat_msg *msgs;
    int n;
    size_t cap;
    int scroll; /* lines above the bottom; 0 follows the end */
} chat_pane;

void chat_pane_free(chat_pane *p);
int chat_pane_add(chat_pane *p, int role, const char *text, size_t len);
/* The last reply, or NULL: notices (a message cut to the window, say) may have come after it. */
chat_msg *chat_pane_reply(chat_pane *p);
/* Appends to the last reply (one streaming in). */
int chat_pane_append(chat_pane *p, const char *text, size_t len);
/* Replaces the last reply's text: its recorded final form, or "" when it is generated again. */
int chat_pane_set_reply(chat_pane *p, const char *text, size_t len);
/* The last reply emptied to be generated again, the notices under it (its statistics, command
 * output since) removed: the new reply and its statistics take their place. */
int chat_pane_restart_reply(chat_pane *p);
/* A notice about the turn in progress goes before its reply while that is still empty, so the reply
 * reads under it, where replies go. cut: the bytes of the last message's beginning the notice says
 * were cut to fit (0: none), drawn dim as what the model does not see. */
int chat_pane_add_notice(chat_pane *p, const char *text, size_t len, size_t cut);
/* The next len bytes of the last reply's text came from a token a drafter proposed (drafted) or
 * the model's own: what the pane marks when the screen says so (F7). */
int chat_pane_mark(chat_pane *p, size_t len, int drafted);
/* Removes the last user message and all after it: a message that failed before any reply. */
void chat_pane_drop_turn(chat_pane *p);
void chat_pane_scroll(chat_pane *p, int lines);
/* Draws the pane: banner (or NULL) above the messages, footer (or NULL: a message being typed over
 * lines) dimmed after them; with c (its conversation in the cache model), the messages whose turns
 * are no longer in the window are dimmed and pinned ones marked (a * after the name); with the
 * screen's draft_marks, the text of drafted tokens underlined. */
void chat_pane_draw(chat_pane *p, const screen *s, WINDOW *w, const char *banner,
                    const char *footer, const cm_conv *c);

/* A turn's statistics (cm_turn_summary) under its reply, when ev ends one: m has applied ev
 * already. */
void chat_pane_add_summary(chat_pane *p, cache_model *m, const json_t *ev);
/* A session event's mark on its conversation's pane (user, token, turn_end, retry, notice; others
 * leave it as it is): one mapping for the live chat's history and for replay. With m (which has
 * applied ev), a turn_end adds the turn's statistics too. */
void chat_pane_apply(chat_pane *p, const json_t *ev, cache_model *m);

#endif
