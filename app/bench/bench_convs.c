#include "bench_convs.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../chat/engine.h"

/* The chat when no file is given: plain requests, some of which ask after what an earlier message
 * said, so that with real weights what a rule dropped can matter. */
static const char *const BUILTIN[] = {
    "Hi! My name is Ada and I keep bees on a small farm near Lyon.",
    "I have eleven hives. Which flowers make the best honey?",
    "My sister Claire lives in Montreal and she hates the cold.",
    "Can you suggest a name for my oldest hive?",
    "What should I plant in spring along the edge of the field?",
    "I also play the cello in an orchestra on Tuesday evenings.",
    "Tell me a short story about a bee that learns music.",
    "What was my sister's name, and where does she live?",
    "How do beekeepers keep their hives alive through a hard winter?",
    "Remind me how many hives I said I have.",
    "Write two lines of a poem about honey and cellos.",
    "What is a good gift for someone who lives somewhere cold?",
    "Which of the things I told you about myself surprised you?",
    "How would you explain a cache to a beekeeper?",
    "Sum up everything you know about me in one sentence.",
    "Thanks! What should I do first tomorrow morning?",
};
enum { N_BUILTIN = sizeof BUILTIN / sizeof BUILTIN[0] };

void bench_convs_free(bench_conv *c, int n)
{
    for (int i = 0; c && i < n; i++) {
        for (int k = 0; k < c[i].n; k++) {
            free(c[i].msgs[k]);
            free(c[i].replies ? c[i].replies[k] : NULL);
        }
        free(c[i].msgs);
        free(c[i].fill);
        free(c[i].replies);
    }
    free(c);
}

/* appends a message (and its reply, when the conversation has them) */
static int add_turn(bench_conv *c, size_t *cap, const char *msg, const char *reply,
                    const char *path, int line)
{
    size_t n = (size_t)c->n + 1;
    if (strlen(msg) > ENGINE_MAX_MESSAGE)
        return err_set("%s: line %d is over %d bytes", path, line, ENGINE_MAX_MESSAGE);
    size_t was = *cap;
    if (err_grow(&c->msgs, &was, n, sizeof *c->msgs, "the messages") ||
        (reply && err_grow(&c->replies, cap, n, sizeof *c->replies, "the replies")))
        return -1;
    *cap = was;
    if (!(c->msgs[c->n] = strdup(msg)) || (reply && !(c->replies[c->n] = strdup(reply))))
        return err_set("out of memory for the messages");
    c->n++;
    return 0;
}

/* one line of --chats or --recall: {"turns": [message, reply, ...], "answer": ...} */
static int parse_conv(const char *text, int recall, bench_conv *c, const char *path, int line)
{
    json_t *o = json_loads(text, 0, NULL), *turns = json_object_get(o, "turns");
    json_t *answer = json_object_get(o, "answer");
    size_t n = json_array_size(turns), cap = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        if (!json_is_string(json_array_get(turns, i)))
            rc = -1;
    if (rc || !json_is_array(turns) || (recall ? !json_is_string(answer) || n % 2 != 1 : n < 2)) {
        json_decref(o);
        return err_set("%s: line %d: not {\"turns\": [message, reply, ...]%s}", path, line,
                       recall ? ", \"answer\": ... with the question last" : "");
    }
    c->recall = recall;
    const char *fill = json_string_value(json_object_get(o, "fill"));
    if (recall && (!fill || !*fill || !strstr(json_string_value(answer), fill) || n < 3)) {
        json_decref(o);
        return err_set("%s: line %d: no \"fill\" inside its answer, or no exchange before the "
                       "question",
                       path, line);
    }
    if (recall && !(c->fill = strdup(fill))) {
        json_decref(o);
        return err_set("out of memory for a recall chat");
    }
    for (size_t i = 0; i + 1 < n + (recall ? 1 : 0) && !rc; i += 2) {
        const char *msg = json_string_value(json_array_get(turns, i));
        const char *reply =
            i + 1 < n ? json_string_value(json_array_get(turns, i + 1)) : json_string_value(answer);
        rc = add_turn(c, &cap, msg, reply, path, line);
    }
    json_decref(o);
    return rc;
}

int bench_convs_read(const char *messages, const char *chats, const char *recall, bench_conv **out,
                     int *n)
{
    const char *path = messages ? messages : chats ? chats : recall;
    bench_conv *c = NULL;
    size_t cap = 0, turn_cap = 0;
    *n = 0;
    if (!path) { /* the built-in chat */
        if (!(c = calloc(1, sizeof *c)))
            return err_set("out of memory for the chat");
        *n = 1;
        for (int i = 0; i < N_BUILTIN; i++)
            if (add_turn(c, &turn_cap, BUILTIN[i], NULL, "the built-in chat", i + 1)) {
                bench_convs_free(c, 1);
                return -1;
            }
        *out = c;
        return 0;
    }
    const char *opt = messages ? "--messages" : chats ? "--chats" : "--recall";
    char where[4200]; /* errors name the option and the file */
    snprintf(where, sizeof where, "%s %s", opt, path);
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set("%s: %s", where, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 0, no = 0;
    while (!rc && getline(&line, &line_cap, f) >= 0) {
        no++;
        line[strcspn(line, "\r\n")] = 0;
        if (!line[strspn(line, " \t")])
            continue;
        if (messages && *n == 0) { /* one conversation, a message a line */
            rc = err_grow(&c, &cap, 1, sizeof *c, "the chat");
            if (!rc)
                memset(c, 0, sizeof *c);
            *n = !rc;
        } else if (!messages) {
            rc = err_grow(&c, &cap, (size_t)*n + 1, sizeof *c, "the conversations");
            if (!rc)
                memset(&c[*n], 0, sizeof *c);
            *n += !rc;
        }
        if (!rc)
            rc = messages ? add_turn(c, &turn_cap, line, NULL, where, no)
                          : parse_conv(line, recall != NULL, &c[*n - 1], where, no);
    }
    if (!rc && ferror(f))
        rc = err_set("%s: %s", where, strerror(errno));
    if (!rc && !*n)
        rc = err_set("%s: no %s in it (one %s a line)", where,
                     messages ? "message" : "conversation", messages ? "message" : "JSON object");
    fclose(f);
    free(line);
    if (rc) {
        bench_convs_free(c, *n);
        c = NULL;
        *n = 0;
    }
    *out = c;
    return rc;
}

/* the packages corpus.py took the text from, when its corpus.json is beside it */
void bench_print_sources(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s/corpus.json", slash ? (int)(slash - path) : 1,
             slash ? path : ".");
    json_t *c = json_load_file(dir, 0, NULL), *pk = json_object_get(c, "packages");
    const char *name;
    json_t *v;
    if (json_is_object(pk)) {
        printf("from Debian's");
        json_object_foreach(pk, name, v) printf(" %s %s", name, json_string_value(v));
        printf("\n");
    }
    json_decref(c);
}

int bench_conv_fill(const tokenizer *tok, const bench_conv *c, const int *answer, int n,
                    size_t lead, unsigned char *is_fill)
{
    const char *text = c->replies[c->n - 1];
    size_t from = lead + (size_t)(strstr(text, c->fill) - text), to = from + strlen(c->fill);
    size_t at = 0, len;
    int count = 0;
    for (int k = 0; k < n; k++, at += len) {
        tok_piece(tok, answer[k], &len);
        is_fill[k] = at < to && at + len > from;
        count += is_fill[k];
    }
    return count;
}
