/* The chat's slash commands, one table for every front end that takes them (the full-screen chat
 * and the line mode): each command's name, arguments, help and handler. A handler acts on the
 * engine, reports through the host's say and note, and tells a front end with a screen what to
 * redraw through its hooks (NULL in line mode); replay --verify redoes the events they record
 * through the same table (act_replay). /help, `chat --commands` and the README's table of commands
 * all come from the table. */
#ifndef KVCHAT_ACTIONS_H
#define KVCHAT_ACTIONS_H

#include <pthread.h>
#include <stdio.h>

#include "session/persist.h"
#include "chat/engine.h"

typedef enum {
    ACT_DONE,  /* nothing more to do */
    ACT_QUIT,  /* the chat ends */
    ACT_HELP,  /* show the help (the TUI's overlay; line mode prints act_help) */
    ACT_REPLY, /* a reply has started (/retry, /edit): the front end streams it as a turn's */
} act_result;

typedef struct act_host act_host;
struct act_host {
    engine *e;
    const loaded_model *lm;
    const engine_opts *eo;
    const chat_persist *persist;
    json_t *events;               /* every event so far, for /save (NULL: /save is refused) */
    pthread_mutex_t *events_lock; /* held while /save reads `events`, where another thread adds */
    int conv;                     /* the conversation in view: /new, /conv and /fork move it */
    void *ctx;                    /* the front end's */
    void (*say)(act_host *h, const char *line);  /* a one-line message */
    void (*note)(act_host *h, const char *text); /* a block of text (/show) */
    /* what a screen shows of it; NULL where there is none */
    void (*switched)(act_host *h);                      /* conv moved */
    void (*forked)(act_host *h, int parent, int child); /* before switched */
    void (*edited)(act_host *h, const char *text);      /* the last turn gives way to text */
    void (*retrying)(act_host *h);                      /* the last reply starts again */
    void (*cleared)(act_host *h);
};

/* Runs "/name args" (line starts with '/'; its text is cut in place). Unknown commands and bad
 * arguments are said, and change nothing. */
act_result act_run(act_host *h, char *line);

/* A command's recorded event redone (replay --verify): new, fork, set, pin, clear and system,
 * through the engine with the values the event recorded. 1 when ev was one, 0 when it is not a
 * command's event, -1 with the error when it cannot be redone. */
int act_replay(engine *e, const json_t *ev);

/* the commands as /help lists them, one a line, to f */
void act_help(FILE *f);
/* the commands packed into lines of at most `width` columns ("/new  /conv N  ..."), for the
 * TUI's overlay: line i into out[i]; returns the number of lines (at most n) */
int act_pack(char out[][128], int n, int width);
/* the README's table of commands (Markdown), to f */
void act_markdown(FILE *f);

#endif
