/* The full-screen chat's help overlay (F1): its keys, the commands from app/actions.c's table, and
 * how to read the cache map. */
#include "tui_help.h"

#include "../ui/screen.h"
#include "actions.h"

void tui_help_draw(int cols)
{
    static const char *const keys[] = {
        "Keys                                                any key closes this help",
        "  Enter        send          Ctrl-C  stop the reply, or empty the line;",
        "                                     idle: twice to quit",
        "  PgUp/PgDn    scroll        Ctrl-D  quit (on an empty line)",
        "  Ctrl-N       new conversation       Ctrl-Left/Right  switch",
        "  Ctrl-R       search history         Ctrl-Z  suspend (fg: back)   F1  help",
        "  F2  hide/show the panel    F3  widen it    F4  mouse off/on (select text)",
        "  F5  log: all/evictions/this conversation   Shift-Up/Down  scroll the log",
        "  F6  the conversations: tokens, bytes, shared, last used, draft",
        "  F7  underline the tokens a drafter proposed and the model kept (--draft)",
        "  \"\"\"  a message over several lines, until a line that ends with \"\"\"",
        "Commands"};
    static const char *const map[] = {
        "Cache map: u you  a gpt-2  k kept  1-9 a turn's start (/pin N)  U/A pinned",
        "           reverse video: what the next eviction drops  . free",
        "           attention read: dim <2%  plain <10%  bold <25%  underlined more",
        "Colours:   cyan you  blue kept  magenta pinned  red evictions  yellow notes",
        "           green the cache's size  dim what the model no longer sees"};
    enum { NK = sizeof keys / sizeof *keys, NM = sizeof map / sizeof *map, NC = 12 };
    char cmds[NC][128] = {{0}};
    const char *lines[NK + NC + NM];
    /* the commands packed to the screen's width inside the box: at 80 columns, 88 hid the last
     * of each line (/unpin, /help, /quit) */
    int width = cols - 4 < 88 ? cols - 4 : 88;
    int nc = act_pack(cmds, NC, width < 40 ? 40 : width), n = 0;
    for (int i = 0; i < NK; i++)
        lines[n++] = keys[i];
    for (int i = 0; i < nc; i++)
        lines[n++] = cmds[i];
    for (int i = 0; i < NM; i++)
        lines[n++] = map[i];
    screen_help(lines, n);
}
