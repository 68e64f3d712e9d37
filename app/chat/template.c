#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"

static const char *const NAMES[] = {"gpt2", "dialogpt", "none"};
static const char GPT2_PREAMBLE[] =
    "A conversation between a curious user and a helpful assistant.\n";

int tpl_parse(const char *s, template_kind *out)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, NAMES[i])) {
            *out = (template_kind)i;
            return 0;
        }
    return err_set("--template: expected gpt2, dialogpt or none, got '%s'", s);
}

const char *tpl_name(template_kind t) { return NAMES[t]; }

template_kind tpl_for_model(const gpt2_config *c, const char *dir, const char **why)
{
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    if (c->conversational) {
        *why = "config.json's task_specific_params marks the model conversational";
        return TPL_DIALOGPT;
    }
    if (strcasestr(base, "dialogpt") || strcasestr(c->name, "dialogpt")) {
        *why = "the model's name says DialoGPT";
        return TPL_DIALOGPT;
    }
    *why = "the default for GPT-2 models";
    return TPL_GPT2;
}

int tpl_preamble(template_kind t, const tokenizer *tok, const char *system, int **ids, int *n,
                 int *cap)
{
    if (system && *system) {
        if (tok_encode(tok, system, strlen(system), 0, ids, n, cap))
            return -1;
        if (t == TPL_GPT2) /* a line of its own before the first "User:" */
            return tok_encode(tok, "\n", 1, 0, ids, n, cap);
        if (t == TPL_DIALOGPT) /* DialoGPT reads it as a turn: closed by <|endoftext|> */
            return tok_encode(tok, "<|endoftext|>", 13, 1, ids, n, cap);
        return 0;
    }
    if (t != TPL_GPT2)
        return 0;
    return tok_encode(tok, GPT2_PREAMBLE, strlen(GPT2_PREAMBLE), 0, ids, n, cap);
}

int tpl_user(template_kind t, const tokenizer *tok, const char *text, size_t len, int first,
             int **ids, int *n, int *cap)
{
    if (t == TPL_NONE)
        return tok_encode(tok, text, len, 0, ids, n, cap);
    if (t == TPL_DIALOGPT) {
        if (tok_encode(tok, text, len, 0, ids, n, cap))
            return -1;
        int eos = tok_eos(tok);
        return tok_encode(tok, "<|endoftext|>", 13, eos >= 0, ids, n, cap);
    }
    size_t total = len + 32;
    char *buf = err_malloc(total, "a chat turn");
    if (!buf)
        return -1;
    int w = snprintf(buf, total, "%sUser: %.*s\nAssistant:", first ? "" : "\n", (int)len, text);
    int rc = tok_encode(tok, buf, (size_t)w, 0, ids, n, cap);
    free(buf);
    return rc;
}

size_t tpl_user_prefix(template_kind t, int first)
{
    return t == TPL_GPT2 ? (first ? 0 : 1) + strlen("User: ") : 0;
}

const char *tpl_stop(template_kind t) { return t == TPL_GPT2 ? "\nUser:" : NULL; }
int tpl_keeps_eos(template_kind t) { return t == TPL_DIALOGPT; }
