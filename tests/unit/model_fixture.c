#include "model_fixture.h"

#include <stdio.h>
#include <string.h>

#include "../../app/cmd/commands.h"
#include "../../kernels/err.h"
#include "check.h"

const char *fixture_model(const char *dtype_name, int ctx)
{
    static char dirs[8][4200];
    static char keys[8][32];
    char key[32];
    snprintf(key, sizeof key, "%s-%d", dtype_name, ctx);
    int i = 0;
    for (; i < 8 && keys[i][0]; i++)
        if (!strcmp(keys[i], key))
            return dirs[i];
    if (i == 8)
        return NULL;
    snprintf(keys[i], sizeof keys[i], "%s", key);
    snprintf(dirs[i], sizeof dirs[i], "%s/m-%s", temp_dir(), key);
    char ctx_s[16];
    snprintf(ctx_s, sizeof ctx_s, "%d", ctx);
    char *argv[] = {"make-tiny-model", dirs[i],
                    "--layers",        "2",
                    "--heads",         "4",
                    "--embd",          "32",
                    "--ctx",           ctx_s,
                    "--seed",          "3",
                    "--dtype",         (char *)dtype_name};
    if (cmd_make_tiny_model(14, argv))
        printf("make-tiny-model: %s\n", err_msg());
    return dirs[i];
}
