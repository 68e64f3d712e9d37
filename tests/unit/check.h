/* A minimal unit-test harness: each test is a function; CHECK records a failure with its message
 * and the test goes on, so one run reports every broken expectation. Output: "ok NAME" / "FAIL
 * NAME: why". */
#ifndef KVCHAT_CHECK_H
#define KVCHAT_CHECK_H

#include <stdio.h>

extern int check_failed;
extern const char *check_current;

#define CHECK(cond, ...)                              \
    do {                                              \
        if (!(cond)) {                                \
            if (!check_failed)                        \
                printf("FAIL %s: ", check_current);   \
            else                                      \
                printf("     %s: ", check_current);   \
            printf(__VA_ARGS__);                      \
            printf(" (%s:%d)\n", __FILE__, __LINE__); \
            check_failed = 1;                         \
        }                                             \
    } while (0)

/* Marks the running test skipped (a GPU test on a machine without one), with the reason. */
#define SKIP(...)                           \
    do {                                    \
        printf("skip %s: ", check_current); \
        printf(__VA_ARGS__);                \
        printf("\n");                       \
        check_skipped = 1;                  \
    } while (0)
extern int check_skipped;

typedef struct {
    const char *name;
    void (*fn)(void);
} unit_test;

/* Each test file defines one table; tests/unit/main.c lists the tables. */
#define TEST_TABLE(table, ...) const unit_test table[] = {__VA_ARGS__, {0, 0}}

/* Path of a file in assets/ (vocab.json, merges.txt). */
const char *asset(const char *name);
/* A fresh temporary directory for this test (removed at exit). */
const char *temp_dir(void);
/* Relative L2 error of a against the reference b. */
double rel_err(const float *a, const float *b, int n);
/* KVCHAT_TEST_QUICK is set (not "0"): a slow run (a sanitizer's) takes the tests' small sizes. */
int test_quick(void);

#endif
