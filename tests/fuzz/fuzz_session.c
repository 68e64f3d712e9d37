/* libFuzzer target: any bytes as a session file. The reader accepts or refuses them with an error,
 * never crashes, hangs or leaks; what it accepts, the cache panel's model replays and the panel
 * draws (on a terminal that writes to /dev/null), at a wide and a narrow size, as replay would; and
 * resume reads it as it would: the settings after each event (a resume event's among them), every
 * turn_end record a conversation is restored from. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <stdlib.h>

#include "../../app/chat/records.h"
#include "../../app/session/session.h"
#include "../../ui/cache_panel.h"

static screen scr;
static WINDOW *wide, *narrow;

static void open_terminal(void)
{
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    if (!out || !in || !newterm("xterm", out, in))
        abort();
    wide = newwin(40, 60, 0, 0);
    narrow = newwin(12, 24, 0, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!wide)
        open_terminal();
    session s;
    if (session_parse(&s, (const char *)data, size, "fuzz") == 0) {
        cache_model m;
        cm_init(&m);
        for (int i = 0; i < s.n_events; i++)
            cm_apply(&m, s.events[i]);
        for (int i = 0; i < m.n_convs; i++) {
            cache_panel_draw(&m, m.convs[i].id, &scr, wide);
            cache_panel_draw(&m, m.convs[i].id, &scr, narrow);
        }
        cm_free(&m);
        for (int i = 0; i <= s.n_events; i++) {
            model_opts mo = {0};
            engine_opts eo = {0};
            session_settings_at(&s, i, &mo, &eo);
            if (i < s.n_events && ev_kind_of(s.events[i]) == EVK_TURN_END) {
                rec_turn_end t;
                int *ids = NULL;
                win_turn *turns = NULL;
                rec_turn_end_read(s.events[i], &t, &ids, &turns);
                free(ids);
                free(turns);
            }
        }
        session_free(&s);
    }
    return 0;
}
