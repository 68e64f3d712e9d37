/* Command-line parsing shared by the subcommands (the options chat/runtime.h loads a model by).
 * Usage errors exit 2, runtime errors 1; main.c prints the message. */
#ifndef KVCHAT_OPTIONS_H
#define KVCHAT_OPTIONS_H

#include <stddef.h>

#include "chat/runtime.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Consumes argv[*i] (and its value) if it is a shared option: 1 if consumed, 0 if not, -1 on error.
 */
int model_opts_parse(model_opts *o, int argc, char **argv, int *i);
/* argv[1..] holds shared options only (a command such as info): 0, or -1 with the error naming the
 * first other argument and `cmd`'s help. */
int model_opts_parse_all(model_opts *o, int argc, char **argv, const char *cmd);
/* The help lines for those options, as literals so commands can append them to their own. */
#define MODEL_OPTS_HELP                                                                           \
    "  -m, --model DIR        Hugging Face GPT-2 directory (config.json, model.safetensors or\n"  \
    "                         pytorch_model.bin, vocab.json, merges.txt); default\n"              \
    "                         $KVCHAT_MODEL, else the gpt2 download in "                          \
    "~/.cache/kvchat/models/gpt2\n"                                                               \
    "      --device D         auto | cpu | cuda (default $KVCHAT_DEVICE, else auto: the GPU "     \
    "when\n"                                                                                      \
    "                         one answers, else the CPU)\n"                                       \
    "      --dtype T          weights in f32 | bf16 | f16 | q8 | q4 (default: bf16 where the\n"   \
    "                         CPU has AVX-512 BF16, else f32; f32 is the exact reference path;\n" \
    "                         q8: int8 in blocks of 32 with an f16 scale, as llama.cpp's q8_0;\n" \
    "                         q4: 4 bits as llama.cpp's q4_0; the embedding, LM head: 6)\n"       \
    "      --gpu-kernels K    fast | basic: the GPU's kernel set (default: fast, unless it "      \
    "fails\n"                                                                                     \
    "                         its self-test on this GPU; basic is the previous release's)\n"      \
    "  -t, --threads N        CPU threads (default: the cores this process may run on)\n"         \
    "  -v, --verbose          say on stderr when there is no usable GPU and why (info and\n"      \
    "                         /show always say it)\n"
#define CACHE_OPTS_HELP                                                                          \
    "  -c, --ctx N            context window in tokens (default and maximum: the model's;\n"     \
    "                         --ctx-size too, as llama-cli spells it)\n"                         \
    "      --cache-mem SIZE   KV pool size, e.g. 512M or 2G (default: 4 full windows, at most\n" \
    "                         half the free memory); at most 2^31 - 1 blocks and 909T\n"         \
    "      --cache-layout L   paged (default) | contiguous\n"                                    \
    "      --block-tokens N   positions per paged block (default 16)\n"                          \
    "      --cache-dtype T    f32 | f16 | bf16 | int8 (per-token, per-head scale) | q4 (q4_0\n"  \
    "                         blocks of 32 along a head); default: bf16 on a GPU; on the CPU\n"  \
    "                         f32 with f32 weights (exact), else f16\n"                          \
    "      --grow-factor F    contiguous growth factor (default 2)\n"                            \
    "      --prealloc         contiguous: allocate the whole window at once\n"
#define SAMPLING_OPTS_HELP                                                                      \
    "  -n, --max-tokens N     new tokens to generate (default 64; --n-predict too)\n"           \
    "      --temp T           temperature; 0 is greedy (default 0.8)\n"                         \
    "      --top-k K          keep the K most likely tokens; 0 is off (default 40)\n"           \
    "      --top-p P          keep the smallest set with probability >= P; 1 is off (default "  \
    "0.95)\n"                                                                                   \
    "      --repeat-penalty R divide logits of ids already in the context by R (default 1.1)\n" \
    "  -s, --seed S           sampling seed; same seed and backend, same tokens (default 0)\n"

/* Speculative decoding's options (model/draft.h) for the commands that take them: like
 * model_opts_parse, 1 matched, 0 not, -1 a bad value (the error set). */
int draft_opts_parse(draft_opts *o, int argc, char **argv, int *i);
#define DRAFT_OPTS_HELP                                                                            \
    "      --draft D          speculative decoding: a drafter proposes tokens, the model checks\n" \
    "                         them in one pass (greedy: the same reply; sampling: the same\n"      \
    "                         distribution). lookup (the tokens after the last earlier match of\n" \
    "                         the context's end), self-q8 (the model's weights in q8), a GPT-2\n"  \
    "                         directory with the same vocabulary, or off (default)\n"              \
    "      --draft-max K      at most K drafted tokens a pass, 1..15 (default 4)\n"                \
    "      --draft-p-min P    a draft model stops drafting where its most likely next token's\n"   \
    "                         probability is under P, before it draws (default 0.5)\n"

/* argv[*i] is FLAG or FLAG=VALUE: sets *value and advances *i; 1 if matched, 0 if not, -1 if the
 * value is missing. Either name may be NULL. */
int opt_match(int argc, char **argv, int *i, const char *shortname, const char *longname,
              const char **value);
int opt_int(const char *flag, const char *s, long lo, long hi, int *out);
int opt_float(const char *flag, const char *s, double lo, double hi, float *out);
int opt_u64(const char *flag, const char *s, unsigned long long *out);
/* 512, 64K, 512M, 2G (powers of 1024) */
int opt_size(const char *flag, const char *s, size_t *out);

/* /set NAME VALUE into mo (n, temp, top-k or top_k, top-p, repeat-penalty, seed, in the ranges
 * the flags take); -1 with the error naming the setting or the value. */
int opt_set_sampling(char *key, const char *val, model_opts *mo);

#endif
