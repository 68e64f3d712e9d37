/* kvchat chat's parts: the command and its options (chat.c), which run the full-screen chat
 * (app/tui.c) or the line mode (chat_lines.c). */
#ifndef KVCHAT_CMD_CHAT_H
#define KVCHAT_CMD_CHAT_H

#include "../chat/engine.h"
#include "../session/persist.h"

/* The line mode on conversation conv (-1: a new one, made once /save listens); stops when sw
 * fails (cmd_chat reports it). The exit status. */
int chat_lines(engine *e, loaded_model *lm, const engine_opts *eo, const chat_persist *persist,
               int conv, const session_writer *sw);

#endif
