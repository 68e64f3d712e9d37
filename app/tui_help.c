/* The full-screen chat's help overlay (F1): its keys, the commands from app/actions.c's table, and
 * how to read the cache map. */
#include "tui_help.h"

#include "../ui/screen.h"
#include "actions.h"

void tui_help_draw(void)
{
    static const char *const keys[] = {
        "Keys",
        "  Enter        send          Ctrl-C  stop the reply (idle: twice to quit)",
        "  PgUp/PgDn    scroll        Ctrl-D  quit (on an empty line)",
        "  Ctrl-N       new conversation       Ctrl-Left/Right  switch",
        "  Ctrl-R       search history         F1  this help",
        "  F2  hide/show the panel    F3  widen it    F4  mouse off/on (select text)",
        "  F5  log: all/evictions/this conversation   Shift-Up/Down  scroll the log",
        "  F6  the conversations, a row each (tokens, bytes, shared, resident, last used)",
        "  \"\"\"  a message over several lines, until a line that ends with \"\"\"",
        "Commands"};
    static const char *const map[] = {
        "Cache map: u you  a gpt-2  k kept  1-9 a turn's start (as /pin counts)  U/A pinned",
        "           reverse video: what the next eviction drops  . free", "",
        "any key closes this help"};
    enum { NK = sizeof keys / sizeof *keys, NM = sizeof map / sizeof *map, NC = 8 };
    char cmds[NC][128] = {{0}};
    const char *lines[NK + NC + NM];
    int nc = act_pack(cmds, NC, 88), n = 0;
    for (int i = 0; i < NK; i++)
        lines[n++] = keys[i];
    for (int i = 0; i < nc; i++)
        lines[n++] = cmds[i];
    for (int i = 0; i < NM; i++)
        lines[n++] = map[i];
    screen_help(lines, n);
}
