/* The terminal: ncurses set up for readline (raw bytes, no keypad translation), colours with a
 * monochrome fallback (and none under NO_COLOR), one window per layout part, safe text drawing. */
#ifndef KVCHAT_UI_SCREEN_H
#define KVCHAT_UI_SCREEN_H

#include <curses.h>
#include <stddef.h>

#include "layout.h"

/* One meaning per colour (screen.c's PAIRS): who wrote a token (you cyan, GPT-2 the terminal's own,
 * the kept prefix blue, pinned magenta), evictions red, kvchat's own messages yellow, the cache's
 * size green; dim is what the model does not see (evicted turns, a message's beginning cut to fit,
 * free cells), and nothing else. How much a turn is read is brightness (the
 * map's READ_ATTRS), so it never hides the writer, in colour or without. */
enum {
    CP_NONE,
    CP_USER,
    CP_ASSISTANT,
    CP_NOTICE,
    CP_KEEP,
    CP_PIN,
    CP_EVICT,
    CP_DIM,
    CP_BAR,
    CP_STATUS,
    CP_WARN,
    CP_GRAPH,
    CP_COUNT
};

typedef struct {
    WINDOW *chat, *panel, *input, *status;
    ui_layout layout;
    panel_mode panel_mode; /* PANEL_NORMAL once opened */
    int color;
    int mouse;       /* reporting the wheel (on): the terminal's own selection needs it off */
    int log_filter;  /* the panel's event log: a cm_log_filter (F5 cycles it) */
    int log_scroll;  /* lines of it scrolled back (Shift-Up/Down) */
    int conv_view;   /* the panel lists the conversations (F6) instead of one's map and graph */
    int draft_marks; /* the chat pane underlines the tokens a drafter proposed (F7; --draft) */
} screen;

/* Takes the terminal (raw, mouse reports, bracketed paste) until screen_close; meanwhile a fatal
 * signal (a crash, SIGTERM, SIGHUP) gives it back before the program dies, and SIGTSTP gives it
 * back while the program is stopped. */
int screen_open(screen *s);
void screen_close(screen *s);
/* Whether the program was stopped (SIGTSTP) and continued since the last call: the terminal is
 * back, and the screen must be drawn again (screen_relayout). */
int screen_continued(void);
/* Re-reads the terminal size and rebuilds the windows (after KEY_RESIZE, or a new panel_mode). */
void screen_relayout(screen *s);
/* A box in the middle of the screen holding lines, as wide as the longest (so it never clips its
 * own text where the screen has room): the help of the chat and of replay. */
void screen_help(const char *const *lines, int n);
/* Mouse reports on (the wheel scrolls) or off (the terminal selects text to copy). */
void screen_mouse(screen *s, int on);
/* Attribute for a colour pair, or the monochrome stand-in. */
int screen_attr(const screen *s, int pair);
/* Draws s[0..n) at (y, x) within max_cols columns, control characters as ^X; returns columns used.
 */
int ui_draw(WINDOW *w, int y, int x, const char *s, size_t n, int max_cols);
int ui_drawf(WINDOW *w, int y, int x, int max_cols, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
