/* What the tokenizer's files share (tokenizer.c: loading the vocabulary and merges, pieces and
 * streaming decode; tok_encode.c: BPE encoding). Nothing else includes it. */
#ifndef KVCHAT_TOK_INTERNAL_H
#define KVCHAT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#include "tokenizer.h"

typedef struct {
    uint64_t
        key; /* left id << 32 | right id; 0 marks an empty slot (pair 0,0 is stored as key+1) */
    int rank, id;
} merge_slot;

struct tokenizer {
    int n_vocab, eos;
    char *bytes;   /* every token's bytes, back to back */
    uint32_t *off; /* token i is bytes[off[i] .. off[i+1]) */
    int byte_id[256];
    merge_slot *merges;
    uint32_t merge_mask;
    pcre2_code *re;
};

#define TOK_EOS_TEXT "<|endoftext|>"

/* code point cp (< 0x10000) as UTF-8 at p; returns its bytes */
int tok_utf8_put(char *p, int cp);
/* the merge of ids a and b (its rank and the id it makes), or NULL */
const merge_slot *tok_merge_find(const tokenizer *t, int a, int b);

#endif
