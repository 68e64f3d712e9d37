/* The live cache panel: occupancy, pool, cache map with the eviction preview and forecast, history
 * graph, event log, speed and memory, drawn from a cache_model (so replay draws it the same way).
 */
#ifndef KVCHAT_UI_CACHE_PANEL_H
#define KVCHAT_UI_CACHE_PANEL_H

#include "cache_model.h"
#include "screen.h"

/* returns the rows the event log got (0: none, the panel too short for it) */
int cache_panel_draw(cache_model *m, int conv, const screen *s, WINDOW *w);

#endif
