/* The full-screen chat's help overlay. */
#ifndef KVCHAT_TUI_HELP_H
#define KVCHAT_TUI_HELP_H

/* draws it over the screen (screen_help), until the next redraw without it */
void tui_help_draw(int cols);

#endif
