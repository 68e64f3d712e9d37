/* GPT-2's byte-level BPE: the pre-tokenizer regex (PCRE2), the byte-to-unicode alphabet of
 * vocab.json, merges by rank. Invalid UTF-8 in the input is replaced by U+FFFD, one per maximal
 * invalid subpart (what Python's bytes.decode(errors="replace") does), before tokenizing. */
#ifndef KVCHAT_TOKENIZER_H
#define KVCHAT_TOKENIZER_H

#include <stddef.h>

typedef struct tokenizer tokenizer;

tokenizer *tok_load(const char *vocab_path, const char *merges_path);
/* DIR/vocab.json and DIR/merges.txt */
tokenizer *tok_load_dir(const char *dir);
void tok_free(tokenizer *t);
int tok_vocab_size(const tokenizer *t); /* highest id + 1 */
int tok_eos(const tokenizer *t);        /* <|endoftext|>, or -1 */

/* Appends the ids of text[0..len) to *ids (realloc'd; *n and *cap track it). With allow_special,
 * the literal text "<|endoftext|>" becomes the EOS id; otherwise it is ordinary text. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int allow_special, int **ids,
               int *n, int *cap);
/* The raw bytes of one token (possibly part of a UTF-8 character); NULL for an unknown id. */
const char *tok_piece(const tokenizer *t, int id, size_t *len);

/* Streaming decode: feed ids, get text that never ends in half a UTF-8 character. Bytes that cannot
 * form valid UTF-8 come out as U+FFFD. */
typedef struct {
    const tokenizer *tok;
    char pending[4];
    int n_pending;
    char *out;
    size_t out_cap;
} tok_stream;

void tok_stream_init(tok_stream *s, const tokenizer *t);
/* Returns the complete text this id finishes (valid until the next call); *len receives its length.
 */
const char *tok_stream_push(tok_stream *s, int id, size_t *len);
/* What is left at the end: an incomplete character becomes U+FFFD. */
const char *tok_stream_flush(tok_stream *s, size_t *len);
void tok_stream_free(tok_stream *s);

/* Length of the valid UTF-8 character at s[0..n): > 0 complete, 0 a valid but incomplete prefix,
 * -k for an invalid maximal subpart of k bytes (to be replaced by one U+FFFD). */
int tok_utf8_step(const unsigned char *s, size_t n);

#endif
