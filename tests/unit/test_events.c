/* model/event_schema.h's checks against hand-written events (a window of 64, a vocabulary of 100),
 * its typed accessors, and the bus holding what it emits to the schema. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
}

static void accessors(void)
{
    json_t *ev = json_loads("{\"ev\":\"prefill\",\"conv\":3,\"t\":2.5,\"ids\":[7,8],\"cached\":5,"
                            "\"ms\":1.25}",
                            0, NULL);
    CHECK(!strcmp(ev_type(ev), "prefill") && ev_is(ev, EV_PREFILL), "type");
    CHECK(ev_conv(ev) == 3 && ev_t(ev) == 2.5, "conv %d, t %g", ev_conv(ev), ev_t(ev));
    CHECK(ev_prefill_cached(ev) == 5 && ev_prefill_ms(ev) == 1.25, "cached %d, ms %g",
          ev_prefill_cached(ev), ev_prefill_ms(ev));
    CHECK(json_array_size(ev_prefill_ids(ev)) == 2, "ids");
    CHECK(ev_prefill_has_cached(ev) && !ev_prefill_has_preamble(ev) && !ev_prefill_preamble(ev),
          "an absent preamble reads as absent and 0");
    json_decref(ev);
}

/* an event that breaks the schema, emitted on a bus made with KVCHAT_CHECK_EVENTS set, aborts the
 * process that emitted it; one that keeps it does not */
static int emit_in_child(const char *field)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("KVCHAT_CHECK_EVENTS", "1", 1);
        ev_bus *b = ev_bus_create();
        ev_emit(b, 1, EV_TOKEN, json_pack("{s:i, s:f}", field, 1, "ms", 0.5));
        ev_bus_free(b);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void emit_checked(void)
{
    int status = emit_in_child("id");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a declared event aborted: %d", status);
    status = emit_in_child("idd");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "an event with an undeclared field and no 'id' was emitted: %d", status);
}

TEST_TABLE(events_tests, {"events/schema_checks", checks}, {"events/typed_accessors", accessors},
           {"events/emitted_events_checked", emit_checked});
