/* llama.cpp's logits for a teacher-forced sequence, one token a step as a chat decodes, so that
 * tests/peer/accuracy.sh can measure llama.cpp's weight types against its own f32 model exactly as
 * it measures kvchat's. Built against a llama.cpp checkout's libllama by accuracy.sh; not part of
 * kvchat. Usage: llama_logits MODEL.gguf ID,ID,... OUT.bin   (one row of n_vocab f32 logits per id)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *data)
{
    (void)data;
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static int fail(const char *what)
{
    fprintf(stderr, "llama_logits: %s\n", what);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return fail("usage: llama_logits MODEL.gguf ID,ID,... OUT.bin");
    int n = 1;
    for (const char *p = argv[2]; *p; p++)
        n += *p == ',';
    llama_token *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids)
        return fail("out of memory");
    char *end = argv[2];
    for (int i = 0; i < n; i++) {
        ids[i] = (llama_token)strtol(end, &end, 10);
        end += *end == ',';
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model)
        return fail("cannot load the model");
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n + 16;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v =
        GGML_TYPE_F32; /* an f32 cache, as accuracy.sh gives kvchat: only the weights differ */
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx)
        return fail("cannot create a context");
    int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = fopen(argv[3], "wb");
    if (!out)
        return fail("cannot open the output file");
    for (int i = 0; i < n; i++) {
        if (llama_decode(ctx, llama_batch_get_one(ids + i, 1)))
            return fail("llama_decode failed");
        const float *logits = llama_get_logits_ith(ctx, -1);
        if (!logits || fwrite(logits, sizeof(float), (size_t)vocab, out) != (size_t)vocab)
            return fail("cannot write the logits");
    }
    if (fclose(out))
        return fail("cannot write the logits");
    llama_free(ctx);
    llama_model_free(model);
    free(ids);
    return 0;
}
