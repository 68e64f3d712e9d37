/* The redo half of the chat's command table (actions.c): each redoes the event its command
 * records, with the recorded values; 1 when redone, 0 when the event is not one the command made,
 * -1 with the error. */
#ifndef KVCHAT_REDO_H
#define KVCHAT_REDO_H

#include <jansson.h>

#include "chat/engine.h"

int act_redo_new(engine *e, const json_t *ev);
int act_redo_fork(engine *e, const json_t *ev);
int act_redo_set(engine *e, const json_t *ev);
int act_redo_pin(engine *e, const json_t *ev);
int act_redo_clear(engine *e, const json_t *ev);
int act_redo_system(engine *e, const json_t *ev);

#endif
