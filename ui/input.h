/* The input line: GNU readline through its callback interface, drawn in an ncurses window (emacs
 * keys, Ctrl-R search, UTF-8 editing, history kept across runs). Keys the application owns (paging,
 * switching conversations, F1, Ctrl-C, the mouse wheel) are recognised here and returned instead.
 */
#ifndef KVCHAT_UI_INPUT_H
#define KVCHAT_UI_INPUT_H

#include <curses.h>

enum {
    IN_NONE,
    IN_INTERRUPT,
    IN_NEW_CONV,
    IN_PAGE_UP,
    IN_PAGE_DOWN,
    IN_PREV_CONV,
    IN_NEXT_CONV,
    IN_HELP,
    IN_WHEEL_UP,
    IN_WHEEL_DOWN,
    IN_RESIZE,
    IN_LINE,
    IN_EOF,
    IN_KEY,
    IN_PANEL,
    IN_WIDEN,
    IN_MOUSE,
    IN_LOG_FILTER,
    IN_LOG_UP,
    IN_LOG_DOWN,
    IN_CONV_VIEW,
    IN_DRAFT_MARKS,
    IN_PASTE_CUT, /* a paste went past INPUT_MAX_BYTES: the line holds what fitted */
    IN_TYPED      /* a key readline took (a letter typed, the cursor moved): nothing to do */
};

/* The most a line (a message) can hold. */
#define INPUT_MAX_BYTES (256 * 1024)

/* history_path may be NULL (no history file). */
int input_open(WINDOW *w, const char *prompt, const char *history_path);
void input_close(void);
void input_set_window(WINDOW *w);
/* the prompt of the lines to come ("> ", or "... " inside a multi-line message) */
void input_set_prompt(const char *prompt);
/* Waits up to the window's timeout for a key; IN_LINE means a line was entered (input_take_line),
 * IN_TYPED that readline took the key, IN_NONE that none came.
 * With feed 0 keys are not given to readline: any key returns IN_KEY. A
 * bracketed paste is inserted in one piece, its line breaks as spaces and other control bytes
 * dropped, so nothing in it acts as a key. */
int input_poll(int feed);
/* The entered line (malloc'd; the caller frees it). */
char *input_take_line(void);
void input_redraw(void);
/* Empties the line being typed, as Ctrl-C does in bash; 0 when it was empty already. */
int input_clear(void);

#endif
