#include "screen.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../model/events.h"
#include "text.h"

static const struct {
    short fg, bg;
    int attr; /* with colour */
    int mono; /* without */
} PAIRS[CP_COUNT] = {
    [CP_USER] = {COLOR_CYAN, -1, A_BOLD, A_BOLD},
    [CP_ASSISTANT] = {-1, -1, A_NORMAL, A_NORMAL},
    [CP_NOTICE] = {COLOR_YELLOW, -1, A_NORMAL, A_NORMAL}, /* dim is the evicted's alone */
    [CP_KEEP] = {COLOR_BLUE, -1, A_BOLD, A_BOLD},
    [CP_PIN] = {COLOR_MAGENTA, -1, A_BOLD, A_BOLD},
    [CP_EVICT] = {COLOR_RED, -1, A_BOLD, A_BOLD},
    [CP_DIM] = {-1, -1, A_DIM, A_DIM},
    [CP_BAR] = {COLOR_GREEN, -1, A_REVERSE, A_REVERSE},
    [CP_STATUS] = {COLOR_BLACK, COLOR_WHITE, A_NORMAL, A_REVERSE},
    [CP_WARN] = {COLOR_YELLOW, -1, A_BOLD, A_BOLD},
    [CP_GRAPH] = {COLOR_GREEN, -1, A_NORMAL, A_NORMAL},
};

int screen_attr(const screen *s, int pair)
{
    return s->color ? (int)COLOR_PAIR(pair) | PAIRS[pair].attr : PAIRS[pair].mono;
}

static void make_windows(screen *s)
{
    layout_compute(COLS, LINES, s->panel_mode, &s->layout);
    const ui_layout *l = &s->layout;
    s->chat = newwin(l->chat.h, l->chat.w, l->chat.y, l->chat.x);
    s->panel = l->panel.h > 0 ? newwin(l->panel.h, l->panel.w, l->panel.y, l->panel.x) : NULL;
    s->input = newwin(l->input.h, l->input.w, l->input.y, l->input.x);
    s->status = newwin(l->status.h, l->status.w, l->status.y, l->status.x);
    /* readline wants the raw bytes: no keypad translation on the input window, which is read */
    keypad(s->input, FALSE);
    wtimeout(s->input, 50);
}

static void free_windows(screen *s)
{
    WINDOW **w[4] = {&s->chat, &s->panel, &s->input, &s->status};
    for (int i = 0; i < 4; i++)
        if (*w[i]) {
            delwin(*w[i]);
            *w[i] = NULL;
        }
}

/* mouse reports (for the wheel) and bracketed paste (a paste arrives as one piece, its control
 * bytes as text) */
static const char MODES_ON[] = "\033[?1000h\033[?2004h", MODES_OFF[] = "\033[?1000l\033[?2004l",
                  MOUSE_ON[] = "\033[?1000h", MOUSE_OFF[] = "\033[?1000l",
                  PASTE_ON[] = "\033[?2004h";
static const int FATAL[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM, SIGHUP};

/* a crash must not leave the terminal in raw mode with mouse reporting on: restore it, then die of
 * the same signal */
static void on_fatal(int sig)
{
    if (!isendwin()) {
        /* not through stdio, whose buffer dies with the process; a failed write leaves nothing to
         * do */
        ssize_t w = write(STDOUT_FILENO, MODES_OFF, sizeof MODES_OFF - 1);
        (void)w;
        endwin();
    }
    fprintf(stderr, "kvchat: fatal signal %d\n", sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

static volatile sig_atomic_t mouse_on, continued;

/* A stop from outside (kill -TSTP; Ctrl-Z is a key in raw mode): the terminal is given back first,
 * as a crash gives it back, and taken again on SIGCONT; the next input poll then redraws. */
static void on_tstp(int sig)
{
    (void)sig;
    int saved = errno;
    ssize_t w = write(STDOUT_FILENO, MODES_OFF, sizeof MODES_OFF - 1);
    endwin(); /* as ncurses' own SIGTSTP handler does */
    ev_clock_stop_process();
    w = mouse_on ? write(STDOUT_FILENO, MODES_ON, sizeof MODES_ON - 1)
                 : write(STDOUT_FILENO, PASTE_ON, sizeof PASTE_ON - 1);
    (void)w;
    continued = 1;
    errno = saved;
}

int screen_continued(void)
{
    int c = continued;
    continued = 0;
    return c;
}

int screen_open(screen *s)
{
    memset(s, 0, sizeof *s);
    if (!initscr())
        return -1;
    raw(); /* Ctrl-C arrives as a byte: it stops a reply instead of killing the program */
    noecho();
    nonl();
    const char *nc = getenv("NO_COLOR");
    if (has_colors() && !(nc && *nc)) {
        start_color();
        use_default_colors();
        for (int i = 1; i < CP_COUNT; i++)
            init_pair((short)i, PAIRS[i].fg, PAIRS[i].bg);
        s->color = 1;
    }
    fputs(MODES_ON, stdout);
    fflush(stdout);
    s->mouse = mouse_on = 1;
    s->panel_mode = PANEL_NORMAL;
    for (size_t i = 0; i < sizeof FATAL / sizeof FATAL[0]; i++)
        signal(FATAL[i], on_fatal);
    signal(SIGTSTP, on_tstp);
    make_windows(s);
    return 0;
}

void screen_close(screen *s)
{
    for (size_t i = 0; i < sizeof FATAL / sizeof FATAL[0]; i++)
        signal(FATAL[i], SIG_DFL);
    signal(SIGTSTP, SIG_DFL);
    free_windows(s);
    if (!isendwin()) {
        fputs(MODES_OFF, stdout);
        fflush(stdout);
        endwin();
    }
}

void screen_help(const char *const *lines, int n)
{
    int widest = 0;
    for (int i = 0; i < n; i++) {
        int w = ui_width(lines[i], strlen(lines[i]));
        widest = w > widest ? w : widest;
    }
    /* above the input and status lines, which stay in view; where the lines do not all fit, the
     * last row says how many are cut, and how to close the help */
    int rows = LINES - 2 > 3 ? LINES - 2 : LINES, inner = n < rows - 2 ? n : rows - 2;
    int hw = widest + 4 < COLS ? widest + 4 : COLS, hh = inner + 2;
    WINDOW *hwin = newwin(hh, hw, (rows - hh) / 2, (COLS - hw) / 2);
    if (!hwin || inner < 1) {
        if (hwin)
            delwin(hwin);
        return;
    }
    werase(hwin);
    box(hwin, 0, 0);
    int cut = inner < n;
    for (int i = 0; i < inner - cut; i++)
        ui_drawf(hwin, i + 1, 2, hw - 4, "%s", lines[i]);
    if (cut)
        ui_drawf(hwin, inner, 2, hw - 4,
                 "(%d more lines on a taller terminal; any key closes this help)", n - inner + 1);
    wnoutrefresh(hwin);
    delwin(hwin);
}

void screen_mouse(screen *s, int on)
{
    fputs(on ? MOUSE_ON : MOUSE_OFF, stdout);
    fflush(stdout);
    s->mouse = mouse_on = on;
}

void screen_relayout(screen *s)
{
    free_windows(s);
    /* once: a second endwin (after a stop, which gave the terminal back already) leaves the
     * alternate screen again, restoring the cursor saved before the stop, above the shell's lines */
    if (!isendwin())
        endwin();
    refresh();
    clear();
    make_windows(s);
}

int ui_draw(WINDOW *w, int y, int x, const char *s, size_t n, int max_cols)
{
    /* a line that does not fit ends in an ellipsis, so a cut number never passes for a whole one */
    int cols = 0, total = ui_width(s, n), room = total > max_cols ? max_cols - 1 : max_cols;
    wmove(w, y, x);
    for (size_t i = 0; i < n;) {
        ui_char c = ui_next(s + i, n - i);
        if (cols + c.cols > room)
            break;
        if (c.caret) {
            waddch(w, '^');
            waddnwstr(w, &c.wc, 1);
        } else if (c.cols > 0 || cols > 0) {
            waddnwstr(w, &c.wc, 1);
        }
        cols += c.cols;
        i += (size_t)c.bytes;
    }
    if (total > max_cols && max_cols > 0) {
        waddnwstr(w, L"\u2026", 1);
        cols++;
    }
    return cols;
}

int ui_drawf(WINDOW *w, int y, int x, int max_cols, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return ui_draw(w, y, x, buf, n < (int)sizeof buf ? (size_t)(n < 0 ? 0 : n) : sizeof buf - 1,
                   max_cols);
}
