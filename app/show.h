/* The chat's /show command (its row is in actions.c's table) */
#ifndef KVCHAT_SHOW_H
#define KVCHAT_SHOW_H

#include "actions.h"

act_result act_show(act_host *h, const char *name, char *args);

#endif
