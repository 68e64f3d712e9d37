/* Between the generation thread and the screen: events and reply text queued as they come (the
 * thread never waits on the screen), drained by the main loop into the widgets' state. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../model/events.h"
#include "tui_state.h"

static void enqueue(tui *t, json_t *ev, int conv, const char *text, size_t len)
{
    item *it = calloc(1, sizeof *it);
    if (!it)
        return;
    it->ev = ev ? json_incref(ev) : NULL;
    it->conv = conv;
    if (text && !(it->text = strndup(text, len))) {
        json_decref(it->ev);
        free(it);
        return;
    }
    pthread_mutex_lock(&t->lock);
    if (t->tail)
        t->tail->next = it;
    else
        t->head = it;
    t->tail = it;
    pthread_mutex_unlock(&t->lock);
}

void tui_on_event(void *ctx, json_t *ev) { enqueue(ctx, ev, 0, NULL, 0); }
void tui_on_text(void *ctx, int conv, const char *text, size_t len)
{
    enqueue(ctx, NULL, conv, text, len);
}

void tui_drain(tui *t)
{
    pthread_mutex_lock(&t->lock);
    item *it = t->head;
    t->head = t->tail = NULL;
    pthread_mutex_unlock(&t->lock);
    while (it) {
        item *next = it->next;
        if (it->ev) {
            cm_apply(&t->v.cm, it->ev);
            json_array_append(t->all, it->ev);
            int c = ev_conv(it->ev);
            if (ev_kind_of(it->ev) == EVK_NOTICE) {
                const char *txt = ev_notice_text(it->ev);
                chat_pane_add_notice(view_pane(&t->v, c), txt ? txt : "", txt ? strlen(txt) : 0,
                                     (size_t)ev_notice_cut_bytes(it->ev));
            }
            if (ev_kind_of(it->ev) == EVK_TOKEN) /* its text comes as on_text's */
                chat_pane_mark(view_pane(&t->v, c), ev_token_text_len(it->ev),
                               ev_token_drafted(it->ev));
            chat_pane_add_summary(view_pane(&t->v, c), &t->v.cm, it->ev);
            json_decref(it->ev);
        } else {
            chat_pane_append(view_pane(&t->v, it->conv), it->text, strlen(it->text));
        }
        free(it->text);
        free(it);
        t->dirty = 1;
        it = next;
    }
}
