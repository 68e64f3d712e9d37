/* kvchat selftest: the GPU's first-use self-test (app/selftest.c) run now, its figures printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../options.h"
#include "../selftest.h"
#include "commands.h"
#include "selftest_cases.h"

const char SELFTEST_HELP[] = "usage: kvchat selftest [-m DIR] [--device auto|cuda] [--dtype "
                             "f32|bf16|f16|q8|q4] [--gpu-kernels fast|basic]\n"
                             "       [--cache-dtype T]\n"
                             "\n"
                             "Runs the GPU self-test now and prints its figures: the model "
                             "prefills a fixed prompt and takes\n"
                             "decode steps on the GPU and on the CPU (the reference, same weight "
                             "and cache dtypes), and the\n"
                             "logits of every step are compared (relative L2). The fast kernels "
                             "are tested first and, if they\n"
                             "fail, the basic ones (--gpu-kernels tests one set). Verdicts are "
                             "cached, as the automatic test\n"
                             "before a GPU's first use with a model caches them. Exit 0 when a "
                             "kernel set passes (or there is\n"
                             "no GPU to test), 1 when none does.\n"
                             "\n"
                             "With --cases, many comparisons in one process (the GPU check's "
                             "engine, one device start for all):\n"
                             "  --cases LIST   WEIGHTS/LAYOUT/CACHE/KERNELS,... e.g. "
                             "f32/paged/f32/fast,bf16/contiguous/int8/basic:\n"
                             "                 each prefills a prompt and is fed forced ids on "
                             "the CPU, then on the device,\n"
                             "                 the logits of every step compared; then each side "
                             "decodes greedily; a weight\n"
                             "                 dtype's first case with a kernel set also runs the "
                             "self-test above\n"
                             "                 (--no-gate: not)\n"
                             "  --prompt N     prompt positions (default 300)\n"
                             "  --force N      forced steps after it (default 200)\n"
                             "  --greedy N     greedy tokens compared (default 16; 0: none)\n"
                             "Prints a row a comparison, \"ok|FAIL|info<TAB>NAME<TAB>DETAIL\", "
                             "and \"N passed, N failed\";\n"
                             "exit 0 when all passed, 1 otherwise. Verdicts are not cached.\n"
                             "\n" MODEL_OPTS_HELP;

static int parse_cases(sc_plan *p, const char *list)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    p->n_cases = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (p->n_cases == SC_MAX_CASES)
            return err_set("--cases: at most %d cases", SC_MAX_CASES);
        if (sc_parse_case(t, &p->cases[p->n_cases++]))
            return -1;
    }
    return p->n_cases ? 0 : err_set("--cases: no case given");
}

static int parse_args(model_opts *mo, sc_plan *p, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = model_opts_parse(mo, argc, argv, &i)) != 0) {
            if (r < 0)
                return -1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--cases", &v)) != 0) {
            if (r < 0 || parse_cases(p, v))
                return -1;
        } else if (opt_match(argc, argv, &i, NULL, "--no-gate", NULL)) {
            p->no_gate = 1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--prompt", &v)) != 0) {
            if (r < 0 || opt_int("--prompt", v, 1, 1 << 20, &p->prompt))
                return -1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--force", &v)) != 0) {
            if (r < 0 || opt_int("--force", v, 0, 1 << 20, &p->force))
                return -1;
        } else if ((r = opt_match(argc, argv, &i, NULL, "--greedy", &v)) != 0) {
            if (r < 0 || opt_int("--greedy", v, 0, 1 << 20, &p->greedy))
                return -1;
        } else {
            return err_set("unknown option '%s' (see kvchat selftest --help)", argv[i]);
        }
    }
    return 0;
}

int cmd_selftest(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    mo.skip_selftest = 1;
    sc_plan plan = {.prompt = 300, .force = 200, .greedy = 16};
    if (parse_args(&mo, &plan, argc, argv))
        return EXIT_USAGE;
    if (plan.n_cases) {
        char dir[4096];
        if (!resolve_model_dir(&mo, dir, sizeof dir))
            return EXIT_RUNTIME;
        int rc = sc_run_plan(&mo, dir, &plan);
        return rc < 0 ? EXIT_RUNTIME : rc;
    }
    loaded_model lm;
    if (load_model(&lm, &mo))
        return EXIT_RUNTIME;
    char key[700], dev[256];
    if (selftest_key(&lm, key, sizeof key)) {
        printf("no GPU in use: nothing to self-test (the CPU is the reference a GPU is checked "
               "against)\n");
        unload_model(&lm);
        return 0;
    }
    lm.backend->describe(lm.backend, dev, sizeof dev);
    printf("%s\n", dev);
    kb_kernels sets[2];
    int n = selftest_candidates(&lm, &mo, sets), rc = 0, passed = 0;
    for (int i = 0; i < n && !rc && !passed; i++) {
        selftest_result r;
        if (selftest_verdict(&lm, sets[i], 0, &r)) {
            rc = -1;
            break;
        }
        passed = r.passed;
        printf("model %s, %s weights, %s cache, %s kernels: %d steps compared with the CPU, worst "
               "relative L2 error %.3g "
               "(limit %.3g): %s\n",
               lm.dir, dt_name(lm.model.wtype), dt_name(kv_pool_opts(lm.pool)->type),
               kernels_name(sets[i]), r.steps, r.worst, r.limit, r.passed ? "passed" : "FAILED");
    }
    if (!rc && !passed)
        rc = err_set(
            "%s failed its self-test: --device auto will use the CPU, --device cuda refuses it",
            dev);
    unload_model(&lm);
    return rc ? EXIT_RUNTIME : 0;
}
