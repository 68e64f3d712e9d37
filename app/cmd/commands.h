/* Subcommands: each takes its own argv (argv[0] is the subcommand) and returns the exit status. */
#ifndef KVCHAT_COMMANDS_H
#define KVCHAT_COMMANDS_H

#include <stdint.h>

#include "../../kernels/dtype.h"
#include "../../model/config.h"

/* `kvchat CMD --help` prints CMD's text; main.c handles it for every command. */
extern const char GENERATE_HELP[], TOKENIZE_HELP[], INFO_HELP[], MAKE_TINY_MODEL_HELP[],
    BENCH_HELP[], GET_MODEL_HELP[], CHAT_HELP[], REPLAY_HELP[], SELFTEST_HELP[], CONVERT_HELP[],
    SESSIONS_HELP[], PERPLEXITY_HELP[];

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_make_tiny_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_get_model(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);

/* make-tiny-model's checkpoint (random weights, the tokenizer, config.json) of shape c in dir:
 * bench --policy --control's model */
int tiny_model_write(const char *dir, const gpt2_config *c, dtype type, uint64_t seed);

#endif
