/* kvchat info: what a checkpoint is and what its KV cache will cost. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../kernels/kvlayout.h"
#include "../chat/template.h"
#include "commands.h"
#include "../options.h"
#include "../safe_text.h"
#include "../selftest.h"

const char INFO_HELP[] =
    "usage: kvchat info [-m DIR] [--dtype f32|bf16|f16|q8|q4]\n"
    "\n"
    "Prints the model's shape, parameter count, weight bytes, and the KV-cache memory per token\n"
    "and at full context for each cache dtype (2 x n_layer x n_ctx x n_embd x bytes per element).\n"
    "\n" MODEL_OPTS_HELP;

static void human(char *buf, size_t n, double bytes)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

int cmd_info(int argc, char **argv)
{
    model_opts mo;
    model_opts_init(&mo);
    if (model_opts_parse_all(&mo, argc, argv, "info"))
        return EXIT_USAGE;
    loaded_model lm;
    if (selftest_load(&lm, &mo))
        return EXIT_RUNTIME;
    const gpt2_config *c = &lm.model.cfg;
    int64_t params = gpt2_param_count(c);
    char a[32], b[32];
    char dir[4 * PATH_MAX]; /* a folder's name is shown as text: it may hold escape sequences */
    printf("model       %s\n", safe_copy(dir, sizeof dir, lm.dir));
    if (kb_fallback_reason())
        printf("device      cpu (no usable GPU: %s)\n", kb_fallback_reason());
    else
        printf("device      %s\n", lm.backend->name);
    printf("shape       %d layers x %d embd x %d heads (head dim %d), context %d, vocabulary %d\n",
           c->n_layer, c->n_embd, c->n_head, c->n_embd / c->n_head, c->n_ctx, c->vocab_size);
    printf("parameters  %lld (%.1fM)\n", (long long)params, params / 1e6);
    human(a, sizeof a, (double)lm.model.st.map_len);
    human(b, sizeof b, (double)gpt2_weights_bytes(&lm.model));
    printf("weights     %s in %s (%s); %s as loaded (%s%s%s)\n", a, lm.model.file,
           dt_name(lm.model.file_type), b, dt_name(lm.model.wtype),
           lm.model.wte.type != lm.model.wtype ? "; token embedding and LM head " : "",
           lm.model.wte.type != lm.model.wtype ? dt_name(lm.model.wte.type) : "");
    printf("tokenizer   %d tokens, <|endoftext|> = %d\n", tok_vocab_size(lm.tok), tok_eos(lm.tok));
    const char *why;
    template_kind tpl = tpl_for_model(c, lm.dir, &why);
    printf("template    %s (%s)\n", tpl_name(tpl), why);
    printf("\nKV cache    per token    full context (%d tokens)\n", c->n_ctx);
    const dtype types[] = {DT_F32, DT_F16, DT_BF16, DT_I8, DT_Q4};
    int hd = c->n_embd / c->n_head;
    for (int i = 0; i < 5; i++) {
        if (types[i] == DT_Q4 && hd % DT_Q4_BLOCK)
            continue; /* heads that do not fill its blocks */
        double per = 2.0 * c->n_layer * c->n_head * (double)kvl_row_bytes(types[i], hd);
        human(a, sizeof a, per);
        human(b, sizeof b, per * c->n_ctx);
        printf("  %-8s  %11s  %12s\n", dt_name(types[i]), a, b);
    }
    printf("(int8 and q4 count their scales: a float per token and head, an f16 per 32 values)\n");
    unload_model(&lm);
    return 0;
}
