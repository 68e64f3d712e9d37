/* Chat templates: how a conversation is written as GPT-2 tokens.
 *   gpt2      a short preamble, then "User: ...\nAssistant:" turns; a reply ends at "\nUser:"
 *   dialogpt  every turn followed by <|endoftext|>, as DialoGPT was trained
 *   none      each message's tokens as they are */
#ifndef KVCHAT_TEMPLATE_H
#define KVCHAT_TEMPLATE_H

#include "../../model/config.h"
#include "../../model/tokenizer.h"

typedef enum { TPL_GPT2, TPL_DIALOGPT, TPL_NONE } template_kind;

int tpl_parse(const char *s, template_kind *out);
const char *tpl_name(template_kind t);
/* The template a model in DIR was trained for, and why (a phrase for /show and info): dialogpt when
 * config.json marks it conversational or its name says DialoGPT, else gpt2. */
template_kind tpl_for_model(const gpt2_config *c, const char *dir, const char **why);
/* Tokens before the first turn (appended to *ids): the system text when there is one (--system,
 * /system), written as the template writes a turn's start, else the template's own preamble. */
int tpl_preamble(template_kind t, const tokenizer *tok, const char *system, int **ids, int *n,
                 int *cap);
/* The tokens of a user message; `first` when no turn precedes it. */
int tpl_user(template_kind t, const tokenizer *tok, const char *text, size_t len, int first,
             int **ids, int *n, int *cap);
/* the bytes tpl_user's text holds before the message's own */
size_t tpl_user_prefix(template_kind t, int first);
/* Text that ends a reply (NULL: only <|endoftext|> and the token limit do). */
const char *tpl_stop(template_kind t);
/* Whether a reply's <|endoftext|> belongs in the conversation (DialoGPT's turn separator). */
int tpl_keeps_eos(template_kind t);

#endif
