#include "chat_pane.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"
#include "../model/events.h"
#include "text.h"

void chat_pane_free(chat_pane *p)
{
    for (int i = 0; i < p->n; i++) {
        free(p->msgs[i].text);
        free(p->msgs[i].drafted);
    }
    free(p->msgs);
    memset(p, 0, sizeof *p);
}

static int msg_append(chat_msg *m, const char *text, size_t len)
{
    return err_append(&m->text, &m->len, &m->cap, text, len, "a chat message");
}

int chat_pane_add(chat_pane *p, int role, const char *text, size_t len)
{
    if (err_grow(&p->msgs, &p->cap, (size_t)p->n + 1, sizeof *p->msgs, "the chat pane"))
        return -1;
    p->msgs[p->n++] = (chat_msg){.role = role};
    return msg_append(&p->msgs[p->n - 1], text, len);
}

chat_msg *chat_pane_reply(chat_pane *p)
{
    for (int i = p->n - 1; i >= 0; i--)
        if (p->msgs[i].role == ROLE_ASSISTANT)
            return &p->msgs[i];
    return NULL;
}

int chat_pane_append(chat_pane *p, const char *text, size_t len)
{
    chat_msg *m = chat_pane_reply(p);
    return m ? msg_append(m, text, len) : -1;
}

int chat_pane_set_reply(chat_pane *p, const char *text, size_t len)
{
    chat_msg *m = chat_pane_reply(p);
    if (!m)
        return -1;
    m->len = 0;
    return msg_append(m, text, len);
}

int chat_pane_add_notice(chat_pane *p, const char *text, size_t len, size_t cut)
{
    for (int i = p->n - 1; cut && i >= 0; i--)
        if (p->msgs[i].role == ROLE_USER) {
            p->msgs[i].cut = cut < p->msgs[i].len ? cut : p->msgs[i].len;
            break;
        }
    int before = p->n && p->msgs[p->n - 1].role == ROLE_ASSISTANT && !p->msgs[p->n - 1].len;
    if (chat_pane_add(p, ROLE_NOTICE, text, len))
        return -1;
    if (before) {
        chat_msg notice = p->msgs[p->n - 1];
        p->msgs[p->n - 1] = p->msgs[p->n - 2];
        p->msgs[p->n - 2] = notice;
    }
    return 0;
}

/* the messages from `keep` on freed */
static void cut_to(chat_pane *p, int keep)
{
    while (p->n > keep) {
        free(p->msgs[--p->n].text);
        free(p->msgs[p->n].drafted);
    }
}

int chat_pane_mark(chat_pane *p, size_t len, int drafted)
{
    chat_msg *m = chat_pane_reply(p);
    if (!m || err_grow(&m->drafted, &m->cap_marks, m->n_marks + len, 1, "the chat pane's marks"))
        return -1;
    memset(m->drafted + m->n_marks, drafted != 0, len);
    m->n_marks += len;
    return 0;
}

void chat_pane_drop_turn(chat_pane *p)
{
    int last = p->n - 1;
    while (last >= 0 && p->msgs[last].role != ROLE_USER)
        last--;
    if (last >= 0)
        cut_to(p, last);
}

int chat_pane_restart_reply(chat_pane *p)
{
    chat_msg *m = chat_pane_reply(p);
    if (!m)
        return -1;
    cut_to(p, (int)(m - p->msgs) + 1);
    m->len = m->n_marks = 0;
    if (m->text)
        m->text[0] = 0;
    return 0;
}

void chat_pane_scroll(chat_pane *p, int lines)
{
    p->scroll += lines;
    if (p->scroll < 0)
        p->scroll = 0;
}

/* a wrapped line of m; with marks, the runs of drafted tokens' bytes underlined */
/* a byte's look beyond its message's: underlined where drafted, dim where cut to fit */
static int byte_look(const chat_msg *m, size_t i, int marks, int dim)
{
    return (marks && i < m->n_marks && m->drafted[i] ? (int)A_UNDERLINE : 0) |
           (i < m->cut ? dim : 0);
}

static void draw_line(WINDOW *w, int y, int x, const chat_msg *m, const ui_line *l, int width,
                      int marks, int attr, int dim)
{
    const char *t = m->text + l->start;
    size_t at = 0;
    while (at < l->len && width > 0) {
        size_t i = l->start + at, run = 1;
        int look = byte_look(m, i, marks, dim);
        while (at + run < l->len && byte_look(m, i + run, marks, dim) == look)
            run++;
        wattrset(w, look & dim ? (look & (int)A_UNDERLINE) | dim : look | attr);
        int cols = ui_draw(w, y, x, t + at, run, width);
        wattrset(w, attr);
        x += cols;
        width -= cols;
        at += run;
    }
}

static const char *const LABEL[] = {
    [ROLE_USER] = "you  ", [ROLE_ASSISTANT] = "gpt-2", [ROLE_NOTICE] = "  ·  "};

/* lines of message i at width w (label column included) */
static int msg_lines(const chat_msg *m, int w)
{
    return ui_wrap(m->text ? m->text : "", m->len, w, NULL, 0);
}

/* Which messages the window still holds: the turns after the preamble are the last messages (the
 * user's and the replies), in order, so message j of m is turn j - (m - k) of the k there. Into
 * in[i] for each message: 0 evicted, 1 in the window, 2 in it and pinned (notices: 1). */
static void window_marks(const chat_pane *p, const cm_conv *c, unsigned char *in)
{
    int m = 0, k = 0, first = -1;
    for (int i = 0; i < p->n; i++)
        m += p->msgs[i].role != ROLE_NOTICE;
    for (int t = 0; c && t < c->n_turns; t++)
        if (c->turns[t].role != ROLE_PREAMBLE) {
            first = first < 0 ? t : first;
            k++;
        }
    for (int i = 0, j = 0; i < p->n; i++) {
        if (!c || p->msgs[i].role == ROLE_NOTICE) {
            in[i] = 1;
            continue;
        }
        int t = j++ - (m - k);
        in[i] = t < 0 ? 0 : 1 + (first + t < c->n_turns && c->turns[first + t].pinned);
    }
}

void chat_pane_draw(chat_pane *p, const screen *s, WINDOW *w, const char *banner,
                    const char *footer, const cm_conv *c)
{
    int h, W;
    getmaxyx(w, h, W);
    werase(w);
    int text_w = W - 8 > 8 ? W - 8 : W; /* a column apart from whatever is to its right */
    ui_line blines[8];
    int nb = banner ? ui_wrap(banner, strlen(banner), W, blines, 8) : 0;
    nb = nb > 8 ? 8 : nb;
    ui_line flines[64];
    int nf = footer ? ui_wrap(footer, strlen(footer), text_w, flines, 64) : 0;
    nf = nf > 64 ? 64 : nf;
    int total = nb + nf;
    for (int i = 0; i < p->n; i++)
        total += msg_lines(&p->msgs[i], text_w) + 1;
    /* scrolled back, the last row says how far: the text takes the rows above it (the line was
     * drawn over the text) */
    int max_scroll = total > h ? total - h + 1 : 0;
    if (p->scroll > max_scroll)
        p->scroll = max_scroll;
    int rows = p->scroll > 0 && h > 1 ? h - 1 : h;
    int first = total - rows - p->scroll; /* the line index shown at the top */
    first = first < 0 ? 0 : first;
    int line = 0;
    for (int k = 0; k < nb; k++, line++)
        if (line >= first && line - first < rows) {
            wattron(w, screen_attr(s, CP_WARN));
            ui_draw(w, line - first, 0, banner + blines[k].start, blines[k].len, W);
            wattroff(w, screen_attr(s, CP_WARN));
        }
    ui_line lines[512];
    unsigned char *in = p->n ? malloc((size_t)p->n) : NULL;
    if (in)
        window_marks(p, c, in);
    for (int i = 0; i < p->n && line - first < rows; i++) {
        const chat_msg *m = &p->msgs[i];
        int n = ui_wrap(m->text ? m->text : "", m->len, text_w, lines, 512);
        int pair = m->role == ROLE_USER        ? CP_USER
                   : m->role == ROLE_ASSISTANT ? CP_ASSISTANT
                                               : CP_NOTICE;
        int mark = in ? in[i] : 1;
        pair = mark ? pair : CP_DIM; /* evicted: no longer what the model sees */
        for (int k = 0; k < n; k++, line++) {
            if (line < first || line - first >= rows || k >= 512)
                continue;
            int y = line - first;
            if (k == 0 && W > 10) { /* the name as its text is drawn: dim only when evicted */
                wattrset(w, screen_attr(s, mark == 2 ? CP_PIN : pair));
                mvwaddstr(w, y, 0, LABEL[m->role]);
                if (mark == 2)
                    mvwaddch(w, y, 5, '*');
            }
            draw_line(w, y, W > 10 ? 7 : 0, m, &lines[k], text_w, s->draft_marks,
                      screen_attr(s, pair), screen_attr(s, CP_DIM));
            wattrset(w, A_NORMAL);
        }
        line++; /* a blank line between messages */
    }
    free(in);
    wattron(w, screen_attr(s, CP_NOTICE));
    for (int k = 0; k < nf; k++, line++)
        if (line >= first && line - first < rows) {
            if (k == 0 && W > 10)
                mvwaddstr(w, line - first, 0, "typing");
            ui_draw(w, line - first, W > 10 ? 7 : 0, footer + flines[k].start, flines[k].len,
                    text_w);
        }
    wattroff(w, screen_attr(s, CP_NOTICE));
    if (p->scroll > 0 && h > 0) {
        wattron(w, screen_attr(s, CP_NOTICE));
        ui_drawf(w, h - 1, W > 24 ? W - 24 : 0, 24, "-- %d lines below --", p->scroll);
        wattroff(w, screen_attr(s, CP_NOTICE));
    }
    wnoutrefresh(w);
}

void chat_pane_add_summary(chat_pane *p, cache_model *m, const json_t *ev)
{
    char buf[256];
    if (ev_kind_of(ev) == EVK_TURN_END &&
        ev_turn_end_cancelled(ev)) { /* live and in replay alike */
        const char *stopped = "stopped (Ctrl-C): the reply ends here";
        chat_pane_add(p, ROLE_NOTICE, stopped, strlen(stopped));
    }
    if (cm_turn_summary(m, ev, buf, sizeof buf))
        chat_pane_add(p, ROLE_NOTICE, buf, strlen(buf));
}

void chat_pane_apply(chat_pane *p, const json_t *ev, cache_model *m)
{
    const char *text;
    if (ev_kind_of(ev) == EVK_USER && (text = ev_user_text(ev))) {
        chat_pane_add(p, ROLE_USER, text, ev_user_text_len(ev));
        chat_pane_add(p, ROLE_ASSISTANT, "", 0);
    } else if (ev_kind_of(ev) == EVK_TOKEN && (text = ev_token_text(ev)) && p->n) {
        chat_pane_append(p, text, ev_token_text_len(ev));
        chat_pane_mark(p, ev_token_text_len(ev), ev_token_drafted(ev));
    } else if (ev_kind_of(ev) == EVK_TURN_END) {
        const char *reply = ev_turn_end_reply(ev);
        if (ev_turn_end_failed(ev) && !ev_turn_end_tokens(ev))
            chat_pane_drop_turn(p); /* the message never went in */
        else if (reply)
            chat_pane_set_reply(p, reply, ev_turn_end_reply_len(ev));
        if (m)
            chat_pane_add_summary(p, m, ev);
    } else if (ev_kind_of(ev) == EVK_RETRY) {
        chat_pane_restart_reply(p);
    } else if (ev_kind_of(ev) == EVK_EDIT) {
        chat_pane_drop_turn(p); /* the edited message comes next, as a user event */
    } else if (ev_kind_of(ev) == EVK_NOTICE && (text = ev_notice_text(ev))) {
        chat_pane_add_notice(p, text, strlen(text), (size_t)ev_notice_cut_bytes(ev));
    }
}
