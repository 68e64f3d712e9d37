/* Where each part of the screen goes: the cache panel beside the chat on wide terminals, below it on
 * narrow ones; the input line and the status line at the bottom. */
#ifndef KVCHAT_UI_LAYOUT_H
#define KVCHAT_UI_LAYOUT_H

typedef struct {
    int y, x, h, w;
} ui_rect;

typedef struct {
    ui_rect chat, panel, input, status;
    int side;        /* panel beside (1) or below (0) the chat */
} ui_layout;

/* Any size works; below 20x8 the panel is left out (h = 0). */
void layout_compute(int cols, int rows, ui_layout *l);

#endif
