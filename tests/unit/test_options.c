#include <math.h>
#include <string.h>

#include "../../app/options.h"
#include "../../kernels/err.h"
#include "check.h"

static void numbers(void)
{
    int v;
    float f;
    CHECK(opt_int("-n", "12", 0, 100, &v) == 0 && v == 12, "12");
    CHECK(opt_int("-n", "12x", 0, 100, &v) == -1 && strstr(err_msg(), "-n: expected an integer"),
          "12x accepted");
    CHECK(opt_int("-n", "101", 0, 100, &v) == -1, "out of range accepted");
    CHECK(opt_int("-n", "", 0, 100, &v) == -1, "empty accepted");
    CHECK(opt_float("--temp", "0.7", 0, 10, &f) == 0 && fabsf(f - 0.7f) < 1e-7f, "0.7");
    CHECK(opt_float("--temp", "nan", 0, 10, &f) == -1, "nan accepted");
    CHECK(opt_float("--temp", "-1", 0, 10, &f) == -1, "-1 accepted");
}

static void shared_options(void)
{
    model_opts o;
    model_opts_init(&o);
    char *argv[] = {"generate", "--temp=0", "-n",      "5", "--dtype", "f16",
                    "--seed",   "9",        "--top-k", "3", "--bogus"};
    int argc = 11, consumed = 0;
    for (int i = 1; i < argc; i++) {
        int r = model_opts_parse(&o, argc, argv, &i);
        CHECK(r >= 0, "error at %s: %s", argv[i], err_msg());
        consumed += r;
    }
    CHECK(consumed == 5, "consumed %d options", consumed);
    CHECK(o.sp.temp == 0 && o.n_predict == 5 && o.wtype == DT_F16 && o.sp.seed == 9 &&
              o.sp.top_k == 3,
          "values");
    char *bad[] = {"generate", "--dtype", "f8"};
    int i = 1;
    CHECK(model_opts_parse(&o, 3, bad, &i) == -1 && strstr(err_msg(), "--dtype"),
          "bad dtype accepted");
    char *missing[] = {"generate", "--top-p"};
    i = 1;
    CHECK(model_opts_parse(&o, 2, missing, &i) == -1 && strstr(err_msg(), "needs a value"),
          "missing value accepted");
}

TEST_TABLE(options_tests, {"options/numbers", numbers}, {"options/shared_options", shared_options});
