/* libFuzzer target: any bytes as a session file. The reader accepts or refuses them with an error,
 * never crashes, hangs or leaks; what it accepts, the cache panel's model can replay. */
#include <stddef.h>
#include <stdint.h>

#include "../../app/session.h"
#include "../../ui/cache_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    session s;
    if (session_parse(&s, (const char *)data, size, "fuzz") == 0) {
        cache_model m;
        cm_init(&m);
        for (int i = 0; i < s.n_events; i++)
            cm_apply(&m, s.events[i]);
        for (int i = 0; i < m.n_convs; i++) {
            unsigned char drop[4096];
            int left;
            double turns;
            if (m.convs[i].n_cells < (int)sizeof drop)
                cm_preview(&m.convs[i], drop, &left, &turns);
        }
        cm_free(&m);
        session_free(&s);
    }
    return 0;
}
