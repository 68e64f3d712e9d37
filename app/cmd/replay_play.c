/* kvchat replay FILE: the session played back on the chat's own view, its tokens at their recorded
 * pace and the panel rebuilt from its recorded cache events. */
#include <limits.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/events.h"
#include "../../ui/view.h"
#include "../options.h"
#include "replay.h"

typedef struct {
    const session *s;
    view v;
    int conv, next;      /* the conversation on screen; the next event to apply */
    double speed, clock; /* session time shown */
    double base;         /* the recorded time plus base is the clock's: resumes, cut pauses */
    double idle;         /* the longest pause played (0: as recorded) */
    int paused, quit, help;
} player;

static void apply(player *p, const json_t *ev)
{
    view_apply(&p->v, ev);
    if (ev_conv(ev) > 0 && (ev_kind_of(ev) == EVK_USER || ev_kind_of(ev) == EVK_TOKEN ||
                            ev_kind_of(ev) == EVK_PREFILL))
        p->conv = ev_conv(ev); /* follow the conversation being talked in */
}

static double event_time(const player *p, int i) { return ev_t(p->s->events[i]); }

/* the events applied up to (not including) event `upto` */
static void forward_to(player *p, int upto)
{
    while (p->next < upto)
        apply(p, p->s->events[p->next++]);
    p->clock = (p->next ? event_time(p, p->next - 1) : 0) + p->base;
}

/* everything rebuilt from the start up to event `upto`: going back */
static void rewind_to(player *p, int upto)
{
    view_clear(&p->v);
    p->next = 0;
    forward_to(p, upto);
}

static int find_turn(const player *p, int from, int dir)
{
    for (int i = from + dir; i >= 0 && i < p->s->n_events; i += dir)
        if (ev_kind_of(p->s->events[i]) == EVK_USER)
            return i;
    return dir > 0 ? p->s->n_events : 0;
}

static void draw(player *p, const char *path)
{
    char sp[16], status[PATH_MAX + 256];
    if (p->speed > 1000)
        snprintf(sp, sizeof sp, "max");
    else
        snprintf(sp, sizeof sp, "%gx", p->speed);
    /* the recorded time of what is on screen, running through a pause (not the playback clock,
     * which races ahead at max) */
    double recorded = p->next ? event_time(p, p->next - 1) : 0;
    if (!p->paused && p->next < p->s->n_events && p->clock - p->base > recorded)
        recorded = p->clock - p->base < event_time(p, p->next) ? p->clock - p->base
                                                               : event_time(p, p->next);
    int end = p->next >= p->s->n_events;
    cm_tick(&p->v.cm, recorded); /* F6's "used" ages through a pause */
    /* the keys before the file's name, which can be long: what is cut is the least needed */
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(status, sizeof status,
             "replay %s%s  event %d/%d  t %.1f s%s  space pause  +/- speed  . step  ] [ turn  F1 "
             "help  q quit  %s",
             sp,
             end         ? " END OF SESSION"
             : p->paused ? " PAUSED"
                         : "",
             p->next, p->s->n_events, recorded,
             p->s->truncated ? "  (file cut: the rest is lost)" : "", name);
    view_draw(&p->v, p->conv, NULL, NULL, status);
    if (p->help) {
        static const char *const lines[] = {
            "Replay keys",
            "  space  pause / play          + / -  faster / slower (0.25x to 64x, then max)",
            "  .      one token               ] / [  next / previous turn",
            "  1-9    show that conversation  F1     this help          q  quit",
            "The panel is rebuilt from the recorded events: it shows what the live chat showed.",
            "",
            "any key closes this help"};
        screen_help(lines, (int)(sizeof lines / sizeof lines[0]));
    }
    view_update(&p->v);
}

/* what a key does */
static void key(player *p, int c)
{
    const session *s = p->s;
    if (c == 'q' || c == 3)
        p->quit = 1;
    else if (c == ' ')
        p->paused = !p->paused;
    else if (c == '+' || c == '=')
        p->speed = p->speed >= 64 ? 1e9 : p->speed * 2;
    else if (c == '-')
        p->speed = p->speed > 64 ? 64 : p->speed > 0.25 ? p->speed / 2 : 0.25;
    else if (c == '.') { /* one token (and whatever precedes it) */
        p->paused = 1;
        while (p->next < s->n_events) {
            const json_t *ev = s->events[p->next++];
            apply(p, ev);
            if (ev_kind_of(ev) == EVK_TOKEN)
                break;
        }
        forward_to(p, p->next); /* the clock to it */
    } else if (c == ']')        /* from the next event on: at a turn's start, the turn after it */
        forward_to(p, find_turn(p, p->next, 1));
    else if (c == '[')
        rewind_to(p, find_turn(p, p->next - 1, -1));
    else if (c >= '1' && c <= '9')
        p->conv = c - '0';
}

int replay_play(const session *s, const char *path, double idle)
{
    player *p = calloc(1, sizeof *p);
    if (!p)
        return err_set("out of memory"), EXIT_RUNTIME;
    p->s = s;
    p->speed = 1;
    p->conv = 1;
    p->idle = idle;
    view_init(&p->v);
    setlocale(LC_ALL, "");
    if (view_open(&p->v)) {
        view_free(&p->v);
        free(p);
        return EXIT_RUNTIME;
    }
    double last = ev_clock();
    while (!p->quit) {
        int c = view_key(&p->v);
        if ((c >= 0 || c == VIEW_F1) && p->help) /* any key closes the help */
            p->help = 0;
        else if (c == VIEW_F1)
            p->help = 1;
        else if (c >= 0)
            key(p, c);
        double now = ev_clock(), dt = now - last;
        last = now;
        if (!p->paused) {
            p->clock += dt * (p->speed > 1000 ? 1e9 : p->speed);
            while (p->next < s->n_events) {
                const json_t *ev = s->events[p->next];
                double at = event_time(p, p->next) + p->base,
                       prev = p->next ? event_time(p, p->next - 1) + p->base : 0;
                if (ev_kind_of(ev) == EVK_RESUME) /* a resumed session restarts its clock */
                    p->base = p->clock - ev_t(ev);
                else if (p->idle > 0 && at - prev > p->idle) /* a long pause: played as idle */
                    p->base -= at - prev - p->idle;
                else if (at > p->clock)
                    break;
                apply(p, s->events[p->next++]);
            }
            if (p->next >= s->n_events)
                p->paused = 1;
        }
        draw(p, path);
    }
    view_close(&p->v);
    view_free(&p->v);
    free(p);
    return 0;
}
