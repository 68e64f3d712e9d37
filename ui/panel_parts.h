/* The parts of the cache panel drawn by files of their own (cache_panel.c draws the rest and lays
 * them out): each draws from row y of the panel's window w, iw columns wide. */
#ifndef KVCHAT_UI_PANEL_PARTS_H
#define KVCHAT_UI_PANEL_PARTS_H

#include "cache_model.h"
#include "screen.h"

/* F6: the conversations, a row each (conv marked), up to row h - 2; returns the next free row.
 * Narrow panels drop the last columns rather than cut them. */
int panel_conv_table(WINDOW *w, const cache_model *m, int conv, int y, int h, int iw);
/* the turns of c with their share of attention, in rows rows at most; returns the next free row */
int panel_turn_reads(WINDOW *w, const cm_conv *c, int y, int rows, int iw);
/* the event log in the rows from y to the panel's last (h: its height); returns its rows */
int panel_log(WINDOW *w, const screen *s, const cache_model *m, int conv, int y, int h, int iw);

#endif
