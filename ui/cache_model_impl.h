/* What the cache model's files share (cache_model.c: the turns, the log and the event table;
 * cache_memory.c: the handlers of the events that move memory). Nothing else includes it. */
#ifndef KVCHAT_CACHE_MODEL_IMPL_H
#define KVCHAT_CACHE_MODEL_IMPL_H

#include "../model/events.h"
#include "cache_model.h"

/* the log's line i back from the newest */
int cmi_log_slot(const cache_model *m, int i);
/* a line of the event log (kind 'e' eviction, 'g' grow, 0 other; replace: the newest line) */
void cmi_log(cache_model *m, int conv, char kind, int replace, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* the totals an event that changed the cache carries (its "cache" block) */
void cmi_apply_totals(cache_model *m, cm_conv *c, const json_t *t);
/* a position or a count of cells, clamped so that sums of two cannot overflow */
int cmi_cells(long long v);

void cm_on_grow(cache_model *m, cm_conv *c, const json_t *ev);
void cm_on_cow(cache_model *m, cm_conv *c, const json_t *ev);
void cm_on_share(cache_model *m, cm_conv *c, const json_t *ev);
void cm_on_fork(cache_model *m, cm_conv *c, const json_t *ev);
void cm_on_stats(cache_model *m, cm_conv *c, const json_t *ev);
void cm_on_offload(cache_model *m, cm_conv *c, const json_t *ev);
void cm_on_restore(cache_model *m, cm_conv *c, const json_t *ev);

#endif
