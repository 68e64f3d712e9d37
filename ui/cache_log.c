/* The panel's event log: a ring of the last CM_LOG_LINES lines, each of a conversation and a kind,
 * read back newest first, all of them, the evictions or one conversation's. */
#include <stdarg.h>
#include <stdio.h>

#include "cache_model_impl.h"

int cmi_log_slot(const cache_model *m, int i)
{
    return (m->log_head - 1 - i + 2 * CM_LOG_LINES) % CM_LOG_LINES;
}

/* A line of conversation conv's, of a kind ('e', 'g' or 0); replace: over the newest line. */
void cmi_log(cache_model *m, int conv, char kind, int replace, const char *fmt, ...)
{
    int slot = replace && m->log_n ? cmi_log_slot(m, 0) : m->log_head;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->log[slot], sizeof m->log[0], fmt, ap);
    va_end(ap);
    m->log_conv[slot] = conv;
    m->log_kind[slot] = kind;
    if (slot != m->log_head)
        return;
    m->log_head = (m->log_head + 1) % CM_LOG_LINES;
    if (m->log_n < CM_LOG_LINES)
        m->log_n++;
}

const char *cm_log_line(const cache_model *m, int i) { return cm_log_find(m, i, LOG_ALL, 0); }

const char *cm_log_find(const cache_model *m, int i, cm_log_filter f, int conv)
{
    for (int k = 0; k < m->log_n; k++) {
        int s = cmi_log_slot(m, k);
        if ((f == LOG_EVICTIONS && m->log_kind[s] != 'e') ||
            (f == LOG_CONV && m->log_conv[s] != conv))
            continue;
        if (i-- == 0)
            return m->log[s];
    }
    return NULL;
}
