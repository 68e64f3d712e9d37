#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <readline/history.h>
#include <readline/readline.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "screen.h"
#include "text.h"

static WINDOW *win;
static int pending_byte = -1;
static char *entered;
static int got_line, got_eof;
static char history_file[PATH_MAX];

enum { HISTORY_MAX = 1000 };

/* Every chat shares the one history file: each entry is appended as it is entered (a closed
 * terminal loses nothing) and the file cut to its last HISTORY_MAX entries, under a lock on
 * FILE.lock, a file never renamed (readline may replace the history file itself when it cuts it).
 * Returns the lock's fd, or -1 when there is no history file. */
static int history_lock(void)
{
    if (!history_file[0])
        return -1;
    char lock[PATH_MAX + 8];
    snprintf(lock, sizeof lock, "%s.lock", history_file);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && flock(fd, LOCK_EX)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void history_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

static void history_append(void)
{
    int fd = history_lock();
    if (fd < 0)
        return; /* without its lock, no write: two chats must not cut each other's entries */
    int made = open(history_file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600); /* append needs a file */
    if (made >= 0)
        close(made);
    if (!append_history(1, history_file))
        history_truncate_file(history_file, HISTORY_MAX);
    history_unlock(fd);
}

static int getc_hook(FILE *f)
{
    (void)f;
    int c = pending_byte;
    pending_byte = -1;
    return c < 0 ? EOF : c;
}

static int avail_hook(void) { return pending_byte >= 0; }

static void noop_prep(int meta) { (void)meta; }

static void noop_deprep(void) {}

static void on_line(char *line)
{
    if (!line) {
        got_eof = 1;
        return;
    }
    if (*line) { /* a pasted message's line breaks as spaces: the history file has a line each */
        char *h = strdup(line);
        for (char *c = h; c && *c; c++)
            *c = *c == '\n' ? ' ' : *c;
        add_history(h ? h : line);
        free(h);
        history_append();
    }
    free(entered);
    entered = line;
    got_line = 1;
}

void input_redraw(void)
{
    if (!win)
        return;
    int w = getmaxx(win);
    werase(win);
    const char *prompt = rl_display_prompt ? rl_display_prompt : "";
    size_t plen = strlen(prompt), llen = rl_line_buffer ? strlen(rl_line_buffer) : 0;
    int pcols = ui_width(prompt, plen);
    int cursor = pcols + ui_width(rl_line_buffer ? rl_line_buffer : "", (size_t)rl_point);
    /* scroll the line so the cursor stays visible */
    size_t from = 0;
    int shift = cursor >= w - 1 ? cursor - (w - 2) : 0, skipped = 0;
    while (shift > skipped && from < llen) {
        ui_char c = ui_next(rl_line_buffer + from, llen - from);
        skipped += c.cols;
        from += (size_t)c.bytes;
    }
    int x = 0;
    if (!shift) {
        wattron(win, A_BOLD);
        x = ui_draw(win, 0, 0, prompt, plen, w);
        wattroff(win, A_BOLD);
    }
    ui_draw(win, 0, x, rl_line_buffer + from, llen - from, w - x);
    wmove(win, 0, cursor - (shift ? skipped : 0) < w ? cursor - (shift ? skipped : 0) : w - 1);
    wnoutrefresh(win);
    doupdate();
}

int input_open(WINDOW *w, const char *prompt, const char *history_path)
{
    win = w;
    rl_catch_signals = 0;
    rl_catch_sigwinch = 0;
    rl_change_environment = 0;
    rl_prep_term_function = noop_prep;
    rl_deprep_term_function = noop_deprep;
    rl_getc_function = getc_hook;
    rl_input_available_hook = avail_hook;
    rl_redisplay_function = input_redraw;
    rl_readline_name = "kvchat";
    /* Ctrl-N is the application's (a new conversation); keep readline from binding it first */
    history_file[0] = 0;
    if (history_path) {
        snprintf(history_file, sizeof history_file, "%s", history_path);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", history_file);
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = 0;
                mkdir(dir, 0700);
                *p = '/';
            }
        int fd = history_lock();
        read_history(history_file); /* a missing file is a first run */
        history_unlock(fd);
    }
    rl_callback_handler_install(prompt, on_line);
    return 0;
}

void input_close(void)
{
    rl_callback_handler_remove();
    free(entered);
    entered = NULL;
    win = NULL;
}

void input_set_window(WINDOW *w) { win = w; }

void input_set_prompt(const char *prompt) { rl_set_prompt(prompt); }

static void feed(int byte)
{
    pending_byte = byte;
    rl_callback_read_char();
}

typedef struct {
    char *buf;
    size_t n, room;
    int cut, after_cr;
} paste_buf;

/* line breaks are kept (\r\n and \r as \n: the message keeps them, the input line shows ^J), a tab
 * is a space, other control bytes (a Ctrl-C, a Ctrl-N, escapes) are dropped */
static void paste_put(paste_buf *p, int c)
{
    int was_cr = p->after_cr;
    p->after_cr = c == '\r';
    if (c == '\n' && was_cr)
        return;
    if (c == '\r')
        c = '\n';
    else if (c == '\t')
        c = ' ';
    else if ((c < 0x20 && c != '\n') || c == 0x7f || c > 255)
        return;
    if (p->n < p->room)
        p->buf[p->n++] = (char)c;
    else
        p->cut = 1;
}

/* The body of a bracketed paste, up to its end marker, inserted as text in one piece: one redisplay
 * instead of one per byte (which made a large paste quadratic), and no byte in it taken for a key.
 * Returns 1 when it had to be cut at INPUT_MAX_BYTES. */
static int paste(void)
{
    static const char END[] = "\033[201~";
    paste_buf p = {.room = INPUT_MAX_BYTES > (size_t)rl_end ? INPUT_MAX_BYTES - (size_t)rl_end : 0};
    if (!(p.buf = malloc(p.room + 1)))
        p.room = 0;
    size_t matched = 0;
    wtimeout(win, 500); /* a terminal that never sends the end marker: give up after a pause */
    for (int c; (c = wgetch(win)) != ERR;) {
        if (c == END[matched]) {
            if (!END[++matched])
                break;
            continue;
        }
        for (size_t k = 0; k < matched; k++) /* a partial marker was text after all */
            paste_put(&p, END[k]);
        matched = c == END[0];
        if (!matched)
            paste_put(&p, c);
    }
    wtimeout(win, 50);
    if (p.n) {
        p.buf[p.n] = 0;
        rl_insert_text(p.buf);
    }
    free(p.buf);
    input_redraw();
    return p.cut;
}

/* the bytes of an escape sequence that arrive together with ESC */
static int read_sequence(unsigned char *buf, int max)
{
    int n = 0;
    wtimeout(win, 5);
    while (n < max) {
        int c = wgetch(win);
        if (c == ERR)
            break;
        buf[n++] = (unsigned char)c;
        if (n >= 2 && buf[0] == '[' && buf[1] == 'M' && n < 5)
            continue; /* a mouse report: three bytes follow */
        if (n >= 2 && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '~') &&
            buf[0] == '[' && !(n == 2 && c == 'M'))
            break;
        if (n == 2 && buf[0] == 'O')
            break;
    }
    wtimeout(win, 50);
    return n;
}

int input_poll(int feed_keys)
{
    if (screen_continued())
        return IN_RESIZE; /* the terminal was someone else's meanwhile: drawn again whole */
    int c = wgetch(win);
    if (c == ERR)
        return IN_NONE;
    if (c == KEY_RESIZE)
        return IN_RESIZE;
    if (!feed_keys) {
        if (c == 27) {
            unsigned char seq[16];
            read_sequence(seq, (int)sizeof seq);
        }
        return IN_KEY;
    }
    if (c == 3)
        return IN_INTERRUPT;
    if (c == 26) { /* Ctrl-Z: raw mode makes it a byte; suspended as vim and htop are (screen.c) */
        raise(SIGTSTP);
        return IN_RESIZE; /* continued: drawn again whole */
    }
    if (c == 14)
        return IN_NEW_CONV;
    if (c == 27) {
        unsigned char seq[16];
        int n = read_sequence(seq, (int)sizeof seq - 1);
        seq[n] = 0;
        struct {
            const char *s;
            int key;
        } known[] = {{"[5~", IN_PAGE_UP},     {"[6~", IN_PAGE_DOWN},   {"[1;5D", IN_PREV_CONV},
                     {"[1;5C", IN_NEXT_CONV}, {"OP", IN_HELP},         {"[11~", IN_HELP},
                     {"OQ", IN_PANEL},        {"[12~", IN_PANEL},      {"OR", IN_WIDEN},
                     {"[13~", IN_WIDEN},      {"OS", IN_MOUSE},        {"[14~", IN_MOUSE},
                     {"[15~", IN_LOG_FILTER}, {"[1;2A", IN_LOG_UP},    {"[1;2B", IN_LOG_DOWN},
                     {"[17~", IN_CONV_VIEW},  {"[18~", IN_DRAFT_MARKS}};
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            if ((int)strlen(known[k].s) == n && !memcmp(seq, known[k].s, (size_t)n))
                return known[k].key;
        if (n == 5 && seq[0] == '[' && seq[1] == 'M') /* mouse: 96 wheel up, 97 wheel down */
            return seq[2] == 96 ? IN_WHEEL_UP : seq[2] == 97 ? IN_WHEEL_DOWN : IN_NONE;
        if (n == 5 && !memcmp(seq, "[200~", 5))
            return paste() ? IN_PASTE_CUT : IN_NONE;
        /* a function key the chat does not use (F7-F12, any with a modifier): readline knows
         * none of them and would type the sequence's last byte, a '~' */
        if (n >= 3 && seq[0] == '[' && seq[n - 1] == '~' && atoi((const char *)seq + 1) >= 11)
            return IN_NONE;
        /* a key with a modifier the chat gives no meaning (Shift-Left, Shift-F1: "[1;2D",
         * "[1;2P"): readline would type its last byte; an arrow moves as the plain one does */
        if (n >= 4 && seq[0] == '[' && memchr(seq, ';', (size_t)n)) {
            if (!strchr("ABCDHF", seq[n - 1]))
                return IN_NONE;
            feed(27);
            feed('[');
            feed(seq[n - 1]);
            return IN_TYPED;
        }
        if (n == 0) /* Esc alone: readline would hold it as the next key's Meta */
            return IN_KEY;
        feed(27);
        for (int i = 0; i < n; i++)
            feed(seq[i]);
    } else {
        feed(c);
    }
    if (got_eof) {
        got_eof = 0;
        return IN_EOF;
    }
    if (got_line) {
        got_line = 0;
        return IN_LINE;
    }
    return IN_TYPED;
}

int input_clear(void)
{
    if (!rl_end)
        return 0;
    rl_delete_text(0, rl_end);
    rl_point = rl_end = 0;
    input_redraw();
    return 1;
}

char *input_take_line(void)
{
    char *l = entered;
    entered = NULL;
    return l;
}
