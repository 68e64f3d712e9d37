#include "tok_internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"

static const char PRETOKEN_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* GPT-2's byte <-> code point alphabet: printable bytes map to themselves, the other 68 to 256.. */
static void byte_alphabet(int cp_of_byte[256])
{
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp_of_byte[b] = printable ? b : 256 + extra++;
    }
}

int tok_utf8_step(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else
        return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return 0;
        unsigned b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
            return -i;
    }
    return need + 1;
}

static uint32_t hash64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

const merge_slot *tok_merge_find(const tokenizer *t, int a, int b)
{
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (uint32_t i = hash64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merges[i].key == key)
            return &t->merges[i];
        if (!t->merges[i].key)
            return NULL;
    }
}

int tok_utf8_put(char *p, int cp)
{
    if (cp < 0x80) {
        p[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        p[0] = (char)(0xc0 | cp >> 6);
        p[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    p[0] = (char)(0xe0 | cp >> 12);
    p[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    p[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

/* vocab.json key (code points of the byte alphabet) -> raw bytes; -1 if a code point is outside it.
 */
static int key_to_bytes(const char *key, const int *byte_of_cp, char *out)
{
    const unsigned char *s = (const unsigned char *)key;
    int n = 0;
    size_t len = strlen(key);
    for (size_t i = 0; i < len;) {
        int step = tok_utf8_step(s + i, len - i), cp;
        if (step <= 0)
            return -1;
        if (step == 1)
            cp = s[i];
        else if (step == 2)
            cp = (s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f);
        else
            return -1; /* the alphabet stops at U+0143 */
        if (cp >= 324 || byte_of_cp[cp] < 0)
            return -1;
        out[n++] = (char)byte_of_cp[cp];
        i += (size_t)step;
    }
    return n;
}

static int load_vocab(tokenizer *t, const char *path, json_t **vocab_out)
{
    json_error_t je;
    json_t *v = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!v)
        return je.line < 0 ? err_set("%s", je.text) /* it names the file: cannot open it */
                           : err_set("%s: %s (line %d)", path, je.text, je.line);
    if (!json_is_object(v) || !json_object_size(v)) {
        json_decref(v);
        return err_set("%s: expected a non-empty JSON object of token -> id", path);
    }
    int cp_of_byte[256], byte_of_cp[324];
    byte_alphabet(cp_of_byte);
    memset(byte_of_cp, 0xff, sizeof byte_of_cp);
    for (int b = 0; b < 256; b++)
        byte_of_cp[cp_of_byte[b]] = b;
    const char *key;
    json_t *val;
    size_t total = 0;
    int max_id = -1;
    json_object_foreach(v, key, val)
    {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (1 << 24)) {
            err_set("%s: id of token '%.40s' is not an integer in 0..16777215", path, key);
            json_decref(v);
            return -1;
        }
        max_id = json_integer_value(val) > max_id ? (int)json_integer_value(val) : max_id;
        total += strlen(key);
    }
    t->n_vocab = max_id + 1;
    t->off = calloc((size_t)t->n_vocab + 1, sizeof *t->off);
    int *len = calloc((size_t)t->n_vocab, sizeof *len);
    char *tmp = malloc(total + 1);
    t->bytes = malloc(total + 1);
    if (!t->off || !len || !tmp || !t->bytes) {
        free(len);
        free(tmp);
        json_decref(v);
        return err_set("%s: out of memory", path);
    }
    memset(len, 0xff, sizeof *len * (size_t)t->n_vocab);
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    /* first pass: lengths (ids may come in any order) */
    size_t pos = 0;
    int rc = 0;
    json_object_foreach(v, key, val)
    {
        int id = (int)json_integer_value(val), n = key_to_bytes(key, byte_of_cp, tmp);
        if (n < 0 || n == 0) {
            rc = err_set("%s: token '%.40s' is not written in GPT-2's byte alphabet", path, key);
            break;
        }
        if (len[id] >= 0) {
            rc = err_set("%s: id %d is used by two tokens", path, id);
            break;
        }
        len[id] = n;
    }
    for (int i = 0; !rc && i < t->n_vocab; i++) {
        t->off[i] = (uint32_t)pos;
        pos += len[i] > 0 ? (size_t)len[i] : 0;
    }
    t->off[t->n_vocab] = (uint32_t)pos;
    if (!rc)
        json_object_foreach(v, key, val)
        {
            int id = (int)json_integer_value(val);
            key_to_bytes(key, byte_of_cp, t->bytes + t->off[id]);
            if (len[id] == 1)
                t->byte_id[(unsigned char)t->bytes[t->off[id]]] = id;
        }
    for (int b = 0; !rc && b < 256; b++)
        if (t->byte_id[b] < 0)
            rc = err_set("%s: no token for byte 0x%02x; not a byte-level BPE vocabulary", path, b);
    json_t *eos = json_object_get(v, TOK_EOS_TEXT);
    t->eos = eos ? (int)json_integer_value(eos) : -1;
    free(len);
    free(tmp);
    if (rc) {
        json_decref(v);
        return rc;
    }
    *vocab_out = v;
    return 0;
}

static int id_of(json_t *vocab, const char *s)
{
    json_t *v = json_object_get(vocab, s);
    return v ? (int)json_integer_value(v) : -1;
}

static int load_merges(tokenizer *t, const char *path, json_t *vocab)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set("%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rank = 0, lineno = 0, rc = 0;
    uint32_t slots = 1024;
    t->merges = calloc(slots, sizeof *t->merges);
    t->merge_mask = slots - 1;
    while (t->merges && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = 0;
        if (got == 0 || (lineno == 1 && !strncmp(line, "#version", 8)))
            continue;
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' ')) {
            rc = err_set("%s: line %d is not \"left right\"", path, lineno);
            break;
        }
        *sp = 0;
        char joined[512];
        if ((size_t)got >= sizeof joined) {
            rc = err_set("%s: line %d is too long", path, lineno);
            break;
        }
        snprintf(joined, sizeof joined, "%s%s", line, sp + 1);
        int a = id_of(vocab, line), b = id_of(vocab, sp + 1), m = id_of(vocab, joined);
        if (a < 0 || b < 0 || m < 0) {
            rc = err_set("%s: line %d merges tokens not in the vocabulary", path, lineno);
            break;
        }
        if ((uint32_t)rank * 2 >= slots) { /* keep the table at most half full */
            merge_slot *old = t->merges;
            uint32_t old_n = slots;
            slots *= 2;
            t->merges = calloc(slots, sizeof *t->merges);
            t->merge_mask = slots - 1;
            for (uint32_t i = 0; t->merges && i < old_n; i++)
                if (old[i].key) {
                    uint32_t j = hash64(old[i].key) & t->merge_mask;
                    while (t->merges[j].key)
                        j = (j + 1) & t->merge_mask;
                    t->merges[j] = old[i];
                }
            free(old);
            if (!t->merges)
                break;
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        uint32_t j = hash64(key) & t->merge_mask;
        while (t->merges[j].key && t->merges[j].key != key)
            j = (j + 1) & t->merge_mask;
        if (!t->merges[j].key) /* a repeated pair keeps its first (lowest) rank */
            t->merges[j] = (merge_slot){key, rank, m};
        rank++;
    }
    if (!t->merges && !rc)
        rc = err_set("%s: out of memory", path);
    else if (!rc && ferror(f))
        rc = err_set("%s: read error", path);
    free(line);
    fclose(f);
    return rc;
}

tokenizer *tok_load(const char *vocab_path, const char *merges_path)
{
    tokenizer *t = err_calloc(1, sizeof *t, "the tokenizer");
    json_t *vocab = NULL;
    if (!t)
        return NULL;
    if (load_vocab(t, vocab_path, &vocab) || load_merges(t, merges_path, vocab)) {
        json_decref(vocab);
        tok_free(t);
        return NULL;
    }
    json_decref(vocab);
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)PRETOKEN_RE, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                          &ec, &eo, NULL);
    if (!t->re) {
        err_set("cannot compile the pre-tokenizer regex (PCRE2 error %d)", ec);
        tok_free(t);
        return NULL;
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    return t;
}

tokenizer *tok_load_dir(const char *dir)
{
    char v[PATH_MAX], m[PATH_MAX];
    snprintf(v, sizeof v, "%s/vocab.json", dir);
    snprintf(m, sizeof m, "%s/merges.txt", dir);
    return tok_load(v, m);
}

void tok_free(tokenizer *t)
{
    if (!t)
        return;
    free(t->bytes);
    free(t->off);
    free(t->merges);
    pcre2_code_free(t->re);
    free(t);
}

int tok_vocab_size(const tokenizer *t) { return t->n_vocab; }
int tok_eos(const tokenizer *t) { return t->eos; }

const char *tok_piece(const tokenizer *t, int id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

void tok_stream_init(tok_stream *s, const tokenizer *t)
{
    memset(s, 0, sizeof *s);
    s->tok = t;
}

void tok_stream_free(tok_stream *s)
{
    free(s->out);
    memset(s, 0, sizeof *s);
}

static const char *stream_feed(tok_stream *s, const char *piece, size_t plen, int final,
                               size_t *len)
{
    size_t need = (s->n_pending + plen) * 3 + 4;
    if (err_grow(&s->out, &s->out_cap, need, 1, "the decoded text")) {
        *len = 0;
        return "";
    }
    /* work on pending + piece in the tail of the buffer, writing complete text at its start */
    unsigned char *in = (unsigned char *)s->out + need - (s->n_pending + plen);
    memcpy(in, s->pending, (size_t)s->n_pending);
    memcpy(in + s->n_pending, piece, plen);
    size_t n = (size_t)s->n_pending + plen, o = 0;
    s->n_pending = 0;
    for (size_t i = 0; i < n;) {
        int k = tok_utf8_step(in + i, n - i);
        if (k > 0) {
            memmove(s->out + o, in + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
        } else if (k == 0 && !final) {
            s->n_pending = (int)(n - i);
            memcpy(s->pending, in + i, (size_t)s->n_pending);
            break;
        } else {
            i += k == 0 ? n - i : (size_t)-k;
            o += (size_t)tok_utf8_put(s->out + o, 0xfffd);
        }
    }
    *len = o;
    return s->out;
}

const char *tok_stream_push(tok_stream *s, int id, size_t *len)
{
    size_t plen = 0;
    const char *p = tok_piece(s->tok, id, &plen);
    return stream_feed(s, p ? p : "", p ? plen : 0, 0, len);
}

const char *tok_stream_flush(tok_stream *s, size_t *len) { return stream_feed(s, "", 0, 1, len); }
