/* kvchat selftest: the GPU's first-use self-test (app/selftest.c) run now, its figures printed. */
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/err.h"
#include "../options.h"
#include "../selftest.h"
#include "commands.h"

const char SELFTEST_HELP[] = "usage: kvchat selftest [-m DIR] [--device auto|cuda] [--dtype "
                             "f32|bf16|f16] [--gpu-kernels fast|basic]\n"
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
                             "\n" MODEL_OPTS_HELP;

int cmd_selftest(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    mo.skip_selftest = 1;
    if (model_opts_parse_all(&mo, argc, argv, "selftest"))
        return EXIT_USAGE;
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
