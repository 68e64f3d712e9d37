/* The session reader when memory runs out: each of its allocations fails in turn while it reads a
 * recorded session; each is an error naming the file, never a crash, and the sanitizer build finds
 * no leak. jansson's own allocations are not failed: its parser (2.14) writes through a failed
 * allocation and crashes, which no caller can prevent. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../../app/session/session.h"
#include "../../kernels/err.h"
#include "check.h"

static void reader_allocation_failures(void)
{
    const char *path = "tests/fuzz/seeds-session/evictions.jsonl";
    session s;
    CHECK(session_read(&s, path) == 0, "%s: %s", path, err_msg());
    int events = s.n_events;
    session_free(&s);
    long n = 0, left = -1;
    int unnamed = 0;
    do {
        err_set("%s", "");
        err_fail_allocs_after(n++);
        if (session_read(&s, path))
            unnamed += !strstr(err_msg(), path);
        else {
            CHECK(s.n_events == events, "a read that succeeded has %d events, not %d", s.n_events,
                  events);
            session_free(&s);
        }
        left = err_fail_allocs_after(-1);
    } while (left < 0 && n < 1000000);
    CHECK(left >= 0, "the read still failed after %ld allocations", n);
    CHECK(!unnamed, "%d failures did not name the file", unnamed);
    printf("     session reader: each of %ld allocations failed in turn\n", n - 1);
}

TEST_TABLE(session_tests, {"session/reader_allocation_failures_clean", reader_allocation_failures});
