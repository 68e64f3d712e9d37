/* The reply's stop-text hold-back (app/chat/stop_text.c) alone: fixed cases with known answers, and
 * random token streams against a reference that finds the stop text in the whole reply at once. */
#include <stdlib.h>
#include <string.h>

#include "../../app/chat/stop_text.h"
#include "../../kernels/err.h"
#include "check.h"

#define STOP "\nUser:"

typedef struct {
    stop_text st;
    char shown[512];
    size_t n_shown;
} run;

static void show(run *r, int final)
{
    size_t n;
    const char *t = stop_ready(&r->st, final, &n);
    memcpy(r->shown + r->n_shown, t, n);
    r->n_shown += n;
    r->shown[r->n_shown] = 0;
}

/* pushes pieces until the stop text; returns the tokens taken back (-1: no stop) and the reply */
static int feed(run *r, const char *const *pieces, int n, char **reply)
{
    memset(r, 0, sizeof *r);
    stop_init(&r->st, STOP);
    int drop = -1;
    for (int i = 0; i < n && drop < 0; i++) {
        int d, hit = stop_push(&r->st, pieces[i], strlen(pieces[i]), &d);
        CHECK(hit >= 0, "push failed: %s", err_msg());
        if (hit)
            drop = d;
        else
            show(r, 0);
    }
    if (drop < 0)
        CHECK(!stop_finish(&r->st, "", 0), "finish failed");
    show(r, 1);
    *reply = stop_take(&r->st);
    return drop;
}

static void case_(const char *const *pieces, int n, const char *want_reply, int want_drop)
{
    run r;
    char *reply;
    int drop = feed(&r, pieces, n, &reply);
    CHECK(reply && !strcmp(reply, want_reply), "reply '%s', want '%s'", reply, want_reply);
    CHECK(drop == want_drop, "%d tokens taken back, want %d", drop, want_drop);
    CHECK(!strcmp(r.shown, want_reply), "shown '%s', want the reply '%s'", r.shown, want_reply);
    free(reply);
}

static void known_answers(void)
{
    const char *plain[] = {"Hello", " there", "!"};
    case_(plain, 3, "Hello there!", -1);
    const char *across[] = {"Hello", " there", "\n", "Us", "er:", " hi"};
    case_(across, 6, "Hello there", 3);
    /* the stop text begins inside a token: that token goes too, and was never shown */
    const char *inside[] = {"ok", "ab\n", "User:"};
    case_(inside, 3, "ok", 2);
    /* a false start is shown once it is settled */
    const char *false_start[] = {"a", "\n", "Usual"};
    case_(false_start, 3, "a\nUsual", -1);
    /* a possible start at the very end is shown when the reply ends */
    const char *at_end[] = {"Bye", "\nUs"};
    case_(at_end, 2, "Bye\nUs", -1);
    const char *first[] = {"\nUser:", "x"};
    case_(first, 2, "", 1);
}

static void held_while_unsettled(void)
{
    stop_text st;
    stop_init(&st, STOP);
    size_t n;
    int d;
    stop_push(&st, "Hi", 2, &d);
    const char *t = stop_ready(&st, 0, &n);
    CHECK(n == 2 && !memcmp(t, "Hi", 2), "'Hi' ready: %zu bytes", n);
    stop_push(&st, "\nU", 2, &d);
    stop_ready(&st, 0, &n);
    CHECK(n == 0, "'\\nU' may begin the stop text, but %zu bytes were ready", n);
    stop_push(&st, "p", 1, &d);
    t = stop_ready(&st, 0, &n);
    CHECK(n == 3 && !memcmp(t, "\nUp", 3), "'\\nUp' settled: %zu bytes ready", n);
    stop_free(&st);

    stop_init(&st, NULL); /* no stop text: nothing waits */
    stop_push(&st, "\n", 1, &d);
    stop_ready(&st, 0, &n);
    CHECK(n == 1, "no stop text, yet %zu of 1 bytes ready", n);
    char *r = stop_take(&st);
    CHECK(r && !strcmp(r, "\n"), "reply");
    free(r);
}

/* the stop text found in the joined reply at once, as a reader would */
static void random_streams(void)
{
    static const char *alphabet[] = {"\n",  "U",   "s",   "e",    "r",    ":",  "a",
                                     "\nU", "er:", "ser", "\nUs", "a\nU", "s\n"};
    srand(7);
    for (int trial = 0; trial < 3000; trial++) {
        const char *pieces[24];
        int n = 1 + rand() % 24, ends[24];
        char joined[256] = "";
        for (int i = 0; i < n; i++) {
            pieces[i] = alphabet[rand() % (int)(sizeof alphabet / sizeof *alphabet)];
            strcat(joined, pieces[i]);
            ends[i] = (int)strlen(joined);
        }
        char *found = strstr(joined, STOP);
        int want_drop = -1, pushed = n;
        char want[256];
        snprintf(want, sizeof want, "%s", joined);
        if (found) {
            int at = (int)(found - joined), kept = 0;
            while (ends[kept] <= at)
                kept++;
            pushed = 0;
            while (ends[pushed] < at + (int)strlen(STOP))
                pushed++;
            pushed++;
            want_drop = pushed - kept;
            want[kept ? ends[kept - 1] : 0] = 0;
        }
        run r;
        char *reply;
        int drop = feed(&r, pieces, n, &reply);
        CHECK(reply && !strcmp(reply, want), "trial %d: reply '%s', want '%s'", trial, reply, want);
        CHECK(drop == want_drop, "trial %d: %d taken back, want %d", trial, drop, want_drop);
        CHECK(!strcmp(r.shown, want), "trial %d: shown '%s' is not the reply '%s'", trial, r.shown,
              want);
        free(reply);
        if (check_failed)
            return;
    }
}

static void out_of_memory(void)
{
    stop_text st;
    stop_init(&st, STOP);
    int d;
    err_fail_allocs_after(0);
    int rc = stop_push(&st, "x", 1, &d);
    err_fail_allocs_after(-1);
    CHECK(rc == -1 && strstr(err_msg(), "a reply"), "rc %d: %s", rc, err_msg());
    stop_free(&st);
}

TEST_TABLE(stop_text_tests, {"stop_text/known_answers", known_answers},
           {"stop_text/held_while_unsettled", held_while_unsettled},
           {"stop_text/random_streams", random_streams},
           {"stop_text/out_of_memory", out_of_memory});
