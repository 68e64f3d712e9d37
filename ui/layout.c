#include "layout.h"

#define SIDE_MIN_COLS 110

void layout_compute(int cols, int rows, panel_mode mode, ui_layout *l)
{
    cols = cols < 1 ? 1 : cols;
    rows = rows < 3 ? 3 : rows;
    int body = rows - 2; /* input and status lines */
    l->status = (ui_rect){rows - 1, 0, 1, cols};
    l->input = (ui_rect){rows - 2, 0, 1, cols};
    l->side = cols >= SIDE_MIN_COLS;
    if (cols < 20 || rows < 8 || mode == PANEL_HIDDEN) {
        l->chat = (ui_rect){0, 0, body, cols};
        l->panel = (ui_rect){0, 0, 0, 0};
    } else if (l->side) {
        int pw = mode == PANEL_WIDE ? cols * 3 / 5 : cols * 2 / 5;
        l->chat = (ui_rect){0, 0, body, cols - pw};
        l->panel = (ui_rect){0, cols - pw, body, pw};
    } else {
        int ph = mode == PANEL_WIDE ? body * 2 / 3 : body / 2;
        l->chat = (ui_rect){0, 0, body - ph, cols};
        l->panel = (ui_rect){body - ph, 0, ph, cols};
    }
}
