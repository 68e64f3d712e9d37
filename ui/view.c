#include "view.h"

#include <string.h>

#include "../kernels/err.h"
#include "../model/events.h"
#include "cache_panel.h"

void view_init(view *v)
{
    memset(v, 0, sizeof *v);
    cm_init(&v->cm);
}

int view_open(view *v)
{
    if (screen_open(&v->scr))
        return err_set("cannot start the terminal UI");
    v->scr.draft_marks = 1; /* shown where there are any (--draft) until F7 */
    return 0;
}

void view_clear(view *v)
{
    cm_free(&v->cm);
    cm_init(&v->cm);
    for (int i = 0; i <= CHAT_PANES; i++)
        chat_pane_free(&v->panes[i]);
}

void view_close(view *v) { screen_close(&v->scr); }

void view_free(view *v)
{
    for (int i = 0; i <= CHAT_PANES; i++)
        chat_pane_free(&v->panes[i]);
    cm_free(&v->cm);
}

chat_pane *view_pane(view *v, int conv)
{
    return conv >= 1 && conv <= CHAT_PANES ? &v->panes[conv] : &v->panes[0];
}

void view_apply(view *v, const json_t *ev)
{
    cm_apply(&v->cm, ev);
    chat_pane_apply(view_pane(v, ev_conv(ev)), ev, &v->cm);
}

void view_draw(view *v, int conv, const char *banner, const char *footer, const char *status)
{
    chat_pane_draw(view_pane(v, conv), &v->scr, v->scr.chat, banner, footer,
                   cm_conv_get(&v->cm, conv));
    v->log_rows = cache_panel_draw(&v->cm, conv, &v->scr, v->scr.panel);
    WINDOW *st = v->scr.status;
    werase(st);
    wbkgd(st, (chtype)screen_attr(&v->scr, CP_STATUS));
    ui_drawf(st, 0, 0, getmaxx(st), " %s", status);
    wnoutrefresh(st);
}

void view_update(view *v)
{
    werase(v->scr.input);
    wnoutrefresh(v->scr.input);
    doupdate();
}

int view_key(view *v)
{
    WINDOW *in = v->scr.input;
    int c = wgetch(in);
    if (c == 27) { /* F1 arrives as ESC O P (or ESC [ 1 1 ~): read the rest at once */
        char seq[8] = "";
        int n = 0, k;
        wtimeout(in, 0);
        while (n < 7 && (k = wgetch(in)) != ERR)
            seq[n++] = (char)k;
        wtimeout(in, 50); /* as screen_open set it */
        return !strcmp(seq, "OP") || !strcmp(seq, "[11~") ? VIEW_F1 : VIEW_NONE;
    }
    if (c == KEY_RESIZE || (c == ERR && screen_continued())) {
        screen_relayout(&v->scr);
        return VIEW_RESIZED;
    }
    return c == ERR ? VIEW_NONE : c;
}
