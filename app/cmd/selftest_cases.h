/* kvchat selftest --cases: the device against the CPU case by case in one process (the GPU
 * check's engine; selftest_cases.c says what a case runs). */
#ifndef KVCHAT_SELFTEST_CASES_H
#define KVCHAT_SELFTEST_CASES_H

#include "../options.h"

typedef struct {
    dtype w, cache;
    kv_layout layout;
    kb_kernels ks;
} sc_case;

enum { SC_MAX_CASES = 32 };
typedef struct {
    sc_case cases[SC_MAX_CASES];
    int n_cases;
    int prompt, force, greedy; /* prompt positions, forced steps, greedy tokens */
    int no_gate;               /* without the first-use self-test of each weights and kernels */
} sc_plan;

/* "bf16/paged/f32/fast": weights, cache layout, cache dtype, kernel set */
int sc_parse_case(const char *s, sc_case *c);
/* Prints a row a comparison ("ok|FAIL|info<TAB>NAME<TAB>DETAIL") and closes with "N passed, N
 * failed": 0 when all passed, 1 when one failed, -1 when a run could not be made (the error set;
 * the rows so far printed). */
int sc_run_plan(const model_opts *mo, const char *dir, const sc_plan *p);

#endif
