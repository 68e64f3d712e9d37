/* A message typed over several lines (app/block.c), against the messages meant. */
#include <stdlib.h>
#include <string.h>

#include "../../app/block.h"
#include "../../kernels/err.h"
#include "check.h"

/* feeds the lines; returns the messages they make, joined by '|' (a command or a plain line as it
 * is), and whether a block is left open */
static void feed(const char *const *lines, int n, char *out, size_t cap, int *open)
{
    msg_block b = {0};
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        char *msg;
        int r = block_feed(&b, lines[i], &msg);
        const char *got = r == BLOCK_LINE ? lines[i] : r == BLOCK_DONE ? msg : NULL;
        if (got) {
            strncat(out, got, cap - strlen(out) - 2);
            strcat(out, "|");
        }
        free(msg);
    }
    *open = b.open;
    block_free(&b);
}

static void known_answers(void)
{
    static const struct {
        const char *lines[6];
        int n;
        const char *want;
        int open;
    } cases[] = {
        {{"hello", "/show"}, 2, "hello|/show|", 0},
        {{"\"\"\"", "line one", "", "line three", "\"\"\""}, 5, "line one\n\nline three|", 0},
        {{"\"\"\"first", "second\"\"\"", "after"}, 3, "first\nsecond|after|", 0},
        {{"\"\"\"one line\"\"\""}, 1, "one line|", 0},
        {{"\"\"\"", "/show is text here", "\"\"\""}, 3, "/show is text here|", 0},
        {{"\"\"\"", "\"\"\""}, 2, "|", 0}, /* an empty block: the caller sends nothing */
        {{"\"\"\"", "still open"}, 2, "", 1},
        {{"say \"\"\" inside", "x\"\"\""}, 2, "say \"\"\" inside|x\"\"\"|", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char out[256];
        int open;
        feed(cases[k].lines, cases[k].n, out, sizeof out, &open);
        CHECK(!strcmp(out, cases[k].want) && open == cases[k].open,
              "case %zu: '%s' (open %d), want '%s' (open %d)", k, out, open, cases[k].want,
              cases[k].open);
    }
}

static void out_of_memory(void)
{
    msg_block b = {0};
    char *msg;
    block_feed(&b, "\"\"\"", &msg);
    char line[2048]; /* longer than the block has room for: it must grow */
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = 0;
    err_fail_allocs_after(0);
    int r = block_feed(&b, line, &msg);
    err_fail_allocs_after(-1);
    CHECK(r == -1 && !b.open && strstr(err_msg(), "multi-line"), "rc %d, open %d: %s", r, b.open,
          err_msg());
    block_free(&b);
}

TEST_TABLE(block_tests, {"block/known_answers", known_answers},
           {"block/out_of_memory", out_of_memory});
