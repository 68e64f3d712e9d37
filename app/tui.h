/* The full-screen chat: the engine on its thread, the UI widgets fed by the event stream. */
#ifndef KVCHAT_TUI_H
#define KVCHAT_TUI_H

#include "session/persist.h"
#include "chat/engine.h"

/* Runs until the user quits; returns the exit status. */
int tui_run(loaded_model *lm, engine *e, const engine_opts *eo, const chat_persist *persist);

#endif
