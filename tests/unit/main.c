/* Runs every unit test table, or only the tests whose names contain one of the arguments; an
 * argument -TEXT leaves out the tests whose names contain TEXT. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#ifndef KVCHAT_ASSETS
#define KVCHAT_ASSETS "assets"
#endif

int check_failed, check_skipped;
const char *check_current;

extern const unit_test dtype_tests[], safetensors_tests[], tokenizer_tests[], kernel_tests[],
    sampler_tests[], options_tests[], forward_tests[], kvcache_tests[], engine_tests[], ui_tests[],
    cuda_tests[], selftest_tests[], session_tests[], pickle_tests[], stop_text_tests[],
    events_tests[], block_tests[], reading_tests[], speculate_tests[], engine_draft_tests[];
static const unit_test *const TABLES[] = {
    dtype_tests,   safetensors_tests, tokenizer_tests, kernel_tests,    sampler_tests,
    options_tests, forward_tests,     kvcache_tests,   engine_tests,    ui_tests,
    cuda_tests,    selftest_tests,    session_tests,   pickle_tests,    stop_text_tests,
    events_tests,  block_tests,       reading_tests,   speculate_tests, engine_draft_tests};

const char *asset(const char *name)
{
    static char buf[4][4096];
    static int k;
    const char *dir = getenv("KVCHAT_ASSETS");
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir && *dir ? dir : KVCHAT_ASSETS, name);
    return buf[k];
}

double rel_err(const float *a, const float *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        num += (double)(a[i] - b[i]) * (a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

int test_quick(void)
{
    const char *q = getenv("KVCHAT_TEST_QUICK");
    return q && *q && strcmp(q, "0");
}

static char tmp_root[64];
static void cleanup(void)
{
    char cmd[128];
    if (tmp_root[0]) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
        if (system(cmd)) {
        }
    }
}

const char *temp_dir(void)
{
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "/tmp/kvchat-unit-XXXXXX");
        if (!mkdtemp(tmp_root)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(cleanup);
    }
    return tmp_root;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    for (size_t t = 0; t < sizeof TABLES / sizeof TABLES[0]; t++)
        for (const unit_test *u = TABLES[t]; u->name; u++) {
            int chosen = 1, left_out = 0;
            for (int a = 1; a < argc; a++)
                if (argv[a][0] == '-')
                    left_out |= strstr(u->name, argv[a] + 1) != NULL;
                else
                    chosen = 0;
            for (int a = 1; a < argc && !chosen; a++)
                chosen = argv[a][0] != '-' && strstr(u->name, argv[a]) != NULL;
            if (!chosen || left_out)
                continue;
            check_failed = 0;
            check_skipped = 0;
            check_current = u->name;
            u->fn();
            fflush(stdout);
            if (check_failed)
                failed++;
            else if (check_skipped)
                skipped++;
            else {
                printf("ok   %s\n", u->name);
                passed++;
            }
        }
    printf("unit: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    fflush(stdout); /* before LeakSanitizer's report at exit, which leaves without flushing */
    return failed ? 1 : 0;
}
