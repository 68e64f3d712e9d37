/* Where each part of the screen goes: the cache panel beside the chat on wide terminals, below it
 * on narrow ones; the input line and the status line at the bottom. */
#ifndef KVCHAT_UI_LAYOUT_H
#define KVCHAT_UI_LAYOUT_H

typedef struct {
    int y, x, h, w;
} ui_rect;

typedef struct {
    ui_rect chat, panel, input, status;
    int side; /* panel beside (1) or below (0) the chat */
} ui_layout;

/* How much of the screen the panel takes (F2 hides and shows it, F3 widens it). */
typedef enum { PANEL_HIDDEN, PANEL_NORMAL, PANEL_WIDE } panel_mode;

/* Any size works; below 20x8, or hidden, the panel is left out (h = 0). It grows with the screen:
 * beside the chat, 2/5 of the columns (3/5 wide); below it, up to half the rows (2/3 wide). */
void layout_compute(int cols, int rows, panel_mode mode, ui_layout *l);

#endif
