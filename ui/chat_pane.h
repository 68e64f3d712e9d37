/* The conversation as the user reads it: messages by role, wrapped to the pane (wide characters
 * measured), scrollable, following the end while a reply streams in. */
#ifndef KVCHAT_UI_CHAT_PANE_H
#define KVCHAT_UI_CHAT_PANE_H

#include <stddef.h>

#include "screen.h"

enum { MSG_USER, MSG_ASSISTANT, MSG_NOTICE };

typedef struct {
    int role;
    char *text;
    size_t len, cap;
} chat_msg;

typedef struct {
    chat_msg *msgs;
    int n;
    size_t cap;
    int scroll;      /* lines above the bottom; 0 follows the end */
} chat_pane;

void chat_pane_free(chat_pane *p);
int chat_pane_add(chat_pane *p, int role, const char *text, size_t len);
/* The last reply, or NULL: notices (a message cut to the window, say) may have come after it. */
chat_msg *chat_pane_reply(chat_pane *p);
/* Appends to the last reply (one streaming in). */
int chat_pane_append(chat_pane *p, const char *text, size_t len);
/* Replaces the last reply's text: its recorded final form, or "" when it is generated again. */
int chat_pane_set_reply(chat_pane *p, const char *text, size_t len);
void chat_pane_scroll(chat_pane *p, int lines);
void chat_pane_draw(chat_pane *p, const screen *s, WINDOW *w, const char *banner);

#endif
