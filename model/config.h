/* GPT-2 hyper-parameters, read from a Hugging Face config.json. */
#ifndef KVCHAT_CONFIG_H
#define KVCHAT_CONFIG_H

typedef struct {
    int n_layer, n_head, n_embd, n_ctx, vocab_size;
    float ln_eps;
    int eos_id;
    int random_weights; /* written by make-tiny-model: the text is noise */
    int conversational; /* task_specific_params.conversational: a chat fine-tune such as DialoGPT */
    char name[128];     /* _name_or_path, when the export kept it ("" otherwise) */
    char about[256];    /* kvchat_about: what a model kvchat ships is, for the screen ("": none) */
} gpt2_config;

int cfg_load(gpt2_config *c, const char *path);
/* Checks the numbers are positive, consistent and small enough for 32-bit indexing. */
int cfg_validate(const gpt2_config *c);
int cfg_save(const gpt2_config *c, const char *path);

#endif
