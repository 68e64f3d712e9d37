/* model/event_schema.h's checks against hand-written events (a window of 64, a vocabulary of 100),
 * its typed accessors, and the bus holding what it emits to the schema. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../model/events.h"
#include "check.h"

/* ev_check of the JSON text: NULL when it passes */
static const char *check_text(const char *text, int strict)
{
    static char why[512];
    json_t *ev = json_loads(text, 0, NULL);
    if (!ev)
        return "(the test's JSON does not parse)";
    const char *w = ev_check(ev, 64, 100, strict);
    snprintf(why, sizeof why, "%s", w ? w : "");
    json_decref(ev);
    return w ? why : NULL;
}

static void passes(const char *text)
{
    const char *w = check_text(text, 1);
    CHECK(!w, "%s refused: %s", text, w);
}

static void refused(const char *text, int strict, const char *want)
{
    const char *w = check_text(text, strict);
    CHECK(w && strstr(w, want), "%s: '%s', want '%s'", text, w ? w : "(passed)", want);
}

static void checks(void)
{
    passes("{\"ev\":\"new\",\"conv\":1,\"t\":0}");
    passes("{\"ev\":\"prefill\",\"conv\":1,\"t\":0.5,\"ids\":[1,2,99],\"cached\":61,"
           "\"preamble\":3,\"ms\":1.5}");
    passes("{\"ev\":\"token\",\"conv\":2,\"t\":1,\"id\":99,\"ms\":0.1,\"text\":\"hi\"}");
    passes("{\"ev\":\"evict\",\"conv\":1,\"t\":1,\"ranges\":[[4,10],[20,44]]}");
    passes("{\"ev\":\"set\",\"conv\":0,\"t\":1,\"temp\":0.7,\"top_k\":40,\"top_p\":0.95,"
           "\"repeat_penalty\":0.00999999978,\"seed\":-5}");
    passes(
        "{\"ev\":\"turn_end\",\"conv\":1,\"t\":2,\"reply\":\"x\",\"tokens\":1,\"window\":[5,6,7],"
        "\"turns\":[[0,2,1,false],[2,1,2,true]],\"keep\":0,\"rng\":\"00ff\",\"sampling\":"
        "{\"temp\":1,\"top_k\":0,\"top_p\":1,\"repeat_penalty\":1,\"seed\":1}}");

    refused("{\"ev\":\"frob\",\"conv\":1,\"t\":0}", 0, "unknown event 'frob'");
    refused("{\"ev\":\"new\",\"conv\":-1,\"t\":0}", 0, "events need an integer 'conv'");
    refused("{\"ev\":\"new\",\"conv\":1}", 0, "a time 't'");
    refused("{\"ev\":\"user\",\"conv\":1,\"t\":0}", 0, "user needs 'text' to be a string");
    refused("{\"ev\":\"token\",\"conv\":1,\"t\":0,\"id\":100}", 0,
            "token needs 'id' to be an integer in 0..99");
    refused("{\"ev\":\"token\",\"conv\":1,\"t\":0,\"id\":1,\"text\":5}", 0,
            "token needs 'text' to be a string");
    refused("{\"ev\":\"prefill\",\"conv\":1,\"t\":0,\"ids\":[1,2,3,4,5],\"cached\":60}", 0,
            "prefill needs 'ids' within the window: 60 cached and 5 new are more than 64");
    refused("{\"ev\":\"prefill\",\"conv\":1,\"t\":0,\"ids\":[1],\"cached\":0,\"preamble\":2}", 0,
            "prefill needs 'preamble' to be at most its 1 ids");
    refused("{\"ev\":\"prefill\",\"conv\":1,\"t\":0,\"ids\":[1,100],\"cached\":0}", 0,
            "prefill needs 'ids' to be token ids (at most 64, each in 0..99)");
    refused("{\"ev\":\"evict\",\"conv\":1,\"t\":1,\"ranges\":[[60,10]]}", 0,
            "evict needs 'ranges' to be [start, length] pairs within the window (64)");
    refused("{\"ev\":\"set\",\"conv\":0,\"t\":1,\"temp\":1,\"top_k\":0,\"top_p\":1,"
            "\"repeat_penalty\":0,\"seed\":1}",
            0, "set needs 'repeat_penalty' to be a number in 0.01..100");
    refused("{\"ev\":\"turn_end\",\"conv\":1,\"t\":2,\"reply\":\"x\",\"tokens\":1,\"window\":[5],"
            "\"turns\":[[0,2,1,false]],\"keep\":0,\"rng\":\"0\",\"sampling\":{\"temp\":1,"
            "\"top_k\":0,\"top_p\":1,\"repeat_penalty\":1,\"seed\":1}}",
            0, "turn_end turns must be [start, length, role, pinned] within its window");
    refused("{\"ev\":\"turn_end\",\"conv\":1,\"t\":2,\"reply\":\"x\",\"tokens\":1,\"window\":[5],"
            "\"turns\":[],\"keep\":0,\"rng\":\"0\",\"sampling\":{\"temp\":1}}",
            0, "turn_end needs 'sampling' to be sampling settings in range");
    refused("{\"ev\":\"turn_end\",\"conv\":0,\"t\":2,\"reply\":\"x\",\"tokens\":1,\"window\":[5],"
            "\"turns\":[],\"keep\":0,\"rng\":\"0\",\"sampling\":{\"temp\":1,\"top_k\":0,"
            "\"top_p\":1,\"repeat_penalty\":1,\"seed\":1}}",
            0, "turn_end needs 'conv' to be a conversation's (1 or more)");
    refused("{\"ev\":\"attention\",\"conv\":1,\"t\":0,\"spans\":[[0,1]],\"mean\":[1],\"max\":[1],"
            "\"turns\":[0.5],\"tokens\":1}",
            0, "attention needs 'turns' to be integers in 0..2147483647");
    /* a field no kvchat declares: a reader takes it (a newer kvchat's), the bus's check does not */
    const char *extra = "{\"ev\":\"token\",\"conv\":1,\"t\":0,\"id\":1,\"future\":1}";
    CHECK(!check_text(extra, 0), "a reader refused an undeclared field");
    refused(extra, 1, "token has 'future', which model/event_schema.h does not declare");

    json_t *block = json_loads("{\"temp\":1,\"top_k\":0,\"top_p\":2,\"repeat_penalty\":1,"
                               "\"seed\":1}",
                               0, NULL);
    const char *w = ev_check_sampling(block);
    CHECK(w && strstr(w, "'top_p' must be a number in 0..1"), "sampling block: %s", w);
    json_decref(block);

    /* a resume's settings are typed blocks too: an older kvchat's (no evict_at, no system) pass,
     * a block with a missing or mistyped setting does not */
    const char *resume = "{\"ev\":\"resume\",\"conv\":0,\"t\":1,\"cache\":{\"layout\":"
                         "\"paged\",\"dtype\":\"f32\",\"block_tokens\":16,\"window\":64,"
                         "\"grow_factor\":2.0,\"prealloc\":false,\"pool_bytes\":131072},"
                         "\"chat\":{\"template\":\"gpt2\",\"keep\":-1,\"evict_min\":0,"
                         "\"evict\":\"exact\",\"fidelity\":0}}";
    passes(resume);
    refused("{\"ev\":\"resume\",\"conv\":0,\"t\":1,\"cache\":{\"layout\":\"paged\","
            "\"dtype\":\"f32\",\"block_tokens\":0,\"window\":64}}",
            0, "resume needs 'cache' to be the cache's settings");
    refused("{\"ev\":\"resume\",\"conv\":0,\"t\":1,\"chat\":{\"keep\":0,\"evict_min\":0,"
            "\"evict\":\"exact\",\"fidelity\":0}}",
            0, "resume needs 'chat' to be the chat's settings");
    block = json_loads("{\"template\":\"gpt2\",\"keep\":0,\"evict_min\":0,\"evict\":\"exact\","
                       "\"fidelity\":0,\"draft_max\":\"4\"}",
                       0, NULL);
    w = ev_check_chatset(block);
    CHECK(w && strstr(w, "'draft_max' must be an integer"), "chat settings block: %s", w);
    json_decref(block);
}

static void accessors(void)
{
    json_t *ev = json_loads("{\"ev\":\"prefill\",\"conv\":3,\"t\":2.5,\"ids\":[7,8],\"cached\":5,"
                            "\"ms\":1.25}",
                            0, NULL);
    CHECK(!strcmp(ev_type(ev), "prefill") && ev_kind_of(ev) == EVK_PREFILL, "type");
    CHECK(ev_conv(ev) == 3 && ev_t(ev) == 2.5, "conv %d, t %g", ev_conv(ev), ev_t(ev));
    CHECK(ev_prefill_cached(ev) == 5 && ev_prefill_ms(ev) == 1.25, "cached %d, ms %g",
          ev_prefill_cached(ev), ev_prefill_ms(ev));
    CHECK(json_array_size(ev_prefill_ids(ev)) == 2, "ids");
    CHECK(ev_prefill_has_cached(ev) && !ev_prefill_has_preamble(ev) && !ev_prefill_preamble(ev),
          "an absent preamble reads as absent and 0");
    json_decref(ev);
}

/* an event that breaks the schema, emitted on a bus made with KVCHAT_CHECK_EVENTS set, aborts the
 * process that emitted it; one that keeps it does not (a misspelled field does not compile: the
 * build check in tests/test_format.sh) */
static int emit_in_child(int id)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("KVCHAT_CHECK_EVENTS", "1", 1);
        ev_bus *b = ev_bus_create();
        ev_emit_token(b, 1, &(ev_token){.id = id, EV_OPT(ms, 0.5)});
        ev_bus_free(b);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void emit_checked(void)
{
    int status = emit_in_child(1);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a declared event aborted: %d", status);
    status = emit_in_child(-1);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "a token of id -1 was emitted: %d",
          status);
}

/* what a sink receives, as the session writer puts it, "t" left out (a clock's) */
static void keep_text(void *ctx, json_t *ev)
{
    json_t *copy = json_copy(ev);
    json_object_del(copy, "t");
    char *text = json_dumps(copy, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    snprintf(ctx, 1024, "%s", text ? text : "(no text)");
    free(text);
    json_decref(copy);
}

static void emitted_as(const char *got, const char *want)
{
    CHECK(!strcmp(got, want), "emitted %s, expected %s", got, want);
}

/* each kind of field, written by the typed emitters as the schema's JSON (hand-written here) */
static void typed_emitters(void)
{
    ev_bus *b = ev_bus_create();
    char got[1024] = "";
    CHECK(b && !ev_subscribe(b, keep_text, got), "a bus");
    if (!b)
        return;
    const int ids[] = {7, 8, 9}, spans[] = {4, 2, 10, 3};
    const double mean[] = {0.25, 0.75};
    ev_emit_prefill(b, 2, &(ev_prefill){.ids = ids, .n_ids = 3, .cached = 5, EV_OPT(ms, 1.5)});
    emitted_as(got, "{\"ev\":\"prefill\",\"conv\":2,\"ids\":[7,8,9],\"cached\":5,\"ms\":1.5}");
    ev_emit_token(b, 2, &(ev_token){.id = 188, EV_OPT(text, "a\0b"), .text_len = 3});
    emitted_as(got, "{\"ev\":\"token\",\"conv\":2,\"id\":188,\"text\":\"a\\u0000b\"}");
    ev_emit_evict(b, 1,
                  &(ev_evict){.ranges = spans,
                              .n_ranges = 2,
                              EV_OPT(prepared, 0),
                              EV_OPT(cache, ((ev_cache){.tokens = 3, .bytes_used = 1LL << 40}))});
    emitted_as(got,
               "{\"ev\":\"evict\",\"conv\":1,\"ranges\":[[4,2],[10,3]],\"prepared\":false,"
               "\"cache\":{\"tokens\":3,\"capacity\":0,\"bytes_used\":1099511627776,"
               "\"bytes_reserved\":0,\"bytes_per_token\":0,\"shared_blocks\":0,\"host_bytes\":0,"
               "\"pool_used\":0,\"blocks_used\":0,\"offloaded_convs\":0}}");
    ev_emit_attention(b, 1,
                      &(ev_attention){.spans = spans,
                                      .n_spans = 2,
                                      .mean = mean,
                                      .n_mean = 2,
                                      .max = mean,
                                      .n_max = 2,
                                      .tokens = 4});
    emitted_as(got,
               "{\"ev\":\"attention\",\"conv\":1,\"spans\":[[4,2],[10,3]],\"mean\":[0.25,0.75],"
               "\"max\":[0.25,0.75],\"tokens\":4}");
    const win_turn turns[] = {{.start = 0, .len = 2, .role = 1},
                              {.start = 2, .len = 1, .role = 2, .pinned = 1}};
    ev_emit_turn_end(
        b, 3,
        &(ev_turn_end){
            .reply = "hi",
            .tokens = 2,
            .window = ids,
            .n_window = 3,
            .turns = turns,
            .n_turns = 2,
            .keep = 1,
            .rng = "00ff",
            .sampling = {.temp = 0.5, .top_k = 4, .top_p = 1, .repeat_penalty = 1, .seed = 9},
            .numbers = ids,
            .n_numbers = 2,
            .has_numbers = 1});
    emitted_as(got,
               "{\"ev\":\"turn_end\",\"conv\":3,\"reply\":\"hi\",\"tokens\":2,\"window\":[7,8,9],"
               "\"turns\":[[0,2,1,false],[2,1,2,true]],\"keep\":1,\"rng\":\"00ff\","
               "\"sampling\":{\"temp\":0.5,\"top_k\":4,\"top_p\":1.0,\"repeat_penalty\":1.0,"
               "\"seed\":9},\"numbers\":[7,8]}");
    ev_emit_clear(b, 4, &(ev_clear){0});
    emitted_as(got, "{\"ev\":\"clear\",\"conv\":4}");
    ev_bus_free(b);
}

/* A stop (Ctrl-Z) leaves ev_clock: a duration measured across it does not count the time stopped
 * (a token's ms, a reply's tok/s), and the clock never runs back. While the stop is open the clock
 * stands: a thread that runs on after SIGCONT before the handler continues the clock reads no
 * stopped time either. */
static void clock_leaves_stops_out(void)
{
    struct timespec nap = {0, 300 * 1000 * 1000};
    double t0 = ev_clock();
    ev_clock_stop();
    double in0 = ev_clock();
    nanosleep(&nap, NULL);
    double in1 = ev_clock();
    ev_clock_continue();
    double t1 = ev_clock();
    ev_clock_continue(); /* a continue without a stop changes nothing */
    double t2 = ev_clock();
    CHECK(t1 >= t0 && t1 - t0 < 0.15 && t2 >= t1 && t2 - t1 < 0.15,
          "across a stop of 0.3 s the clock moved %.3f s, then %.3f s", t1 - t0, t2 - t1);
    CHECK(in1 == in0 && in0 >= t0 && t1 >= in1,
          "while stopped the clock moved %.3f s (from %.3f to %.3f)", in1 - in0, in0, in1);
}

TEST_TABLE(events_tests, {"events/schema_checks", checks}, {"events/typed_accessors", accessors},
           {"events/emitted_events_checked", emit_checked},
           {"events/typed_emitters_write_the_schema", typed_emitters},
           {"events/clock_leaves_stops_out", clock_leaves_stops_out});
