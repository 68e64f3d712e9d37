/* kvchat chat's own options, parsed into chat_args (chat_options.c). */
#ifndef KVCHAT_CHAT_OPTIONS_H
#define KVCHAT_CHAT_OPTIONS_H

#include "../chat/engine.h"

typedef struct {
    engine_opts eo;
    const char *events, *session, *resume;
    int no_tui, no_save, save_cache, force, commands;
    char last[4096]; /* --resume last: the newest saved session */
} chat_args;

/* argv[*i] if it is one of chat's own options: 1 taken (with its value, *i moved past it), 0 not
 * one of them, -1 a bad value (the error set) */
int chat_opt(chat_args *a, int argc, char **argv, int *i);

#endif
