/* Text to ids: GPT-2's pre-tokenizing pattern (PCRE2), then byte-pair merges by rank with a heap,
 * <|endoftext|> taken as the special token where allowed. */
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"
#include "tok_internal.h"

typedef struct {
    int *ids, *prev, *next; /* one allocation: ids, prev and next, len each */
    struct hent {
        int rank, pos;
    } * heap;
    size_t cap_ids, cap_heap;
    int n_heap;
} bpe_work;

static int push_out(int **ids, int *n, int *cap, int id)
{
    if (*n == *cap) {
        size_t c = (size_t)*cap;
        if (err_grow(ids, &c, (size_t)*n + 1, sizeof **ids, "the token ids"))
            return -1;
        *cap = (int)c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

static int hless(struct hent a, struct hent b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(bpe_work *w, int rank, int pos)
{
    int i = w->n_heap++;
    w->heap[i] = (struct hent){rank, pos};
    while (i && hless(w->heap[i], w->heap[(i - 1) / 2])) {
        struct hent tmp = w->heap[i];
        w->heap[i] = w->heap[(i - 1) / 2];
        w->heap[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static struct hent heap_pop(bpe_work *w)
{
    struct hent top = w->heap[0];
    w->heap[0] = w->heap[--w->n_heap];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->n_heap && hless(w->heap[l], w->heap[m]))
            m = l;
        if (r < w->n_heap && hless(w->heap[r], w->heap[m]))
            m = r;
        if (m == i)
            break;
        struct hent tmp = w->heap[i];
        w->heap[i] = w->heap[m];
        w->heap[m] = tmp;
        i = m;
    }
    return top;
}

static void try_pair(const tokenizer *t, bpe_work *w, int i)
{
    if (i < 0 || w->next[i] < 0)
        return;
    const merge_slot *m = tok_merge_find(t, w->ids[i], w->ids[w->next[i]]);
    if (m)
        heap_push(w, m->rank, i);
}

/* Lowest-rank pair first (leftmost among equals), with a heap so long pre-tokens stay O(n log n).
 */
static int bpe(const tokenizer *t, bpe_work *w, const unsigned char *s, int len, int **ids, int *n,
               int *cap)
{
    if (err_grow(&w->ids, &w->cap_ids, 3 * (size_t)len, sizeof *w->ids,
                 "the tokenizer's work space") ||
        err_grow(&w->heap, &w->cap_heap, 3 * (size_t)len, sizeof *w->heap,
                 "the tokenizer's work space"))
        return -1;
    w->prev = w->ids + len;
    w->next = w->prev + len;
    w->n_heap = 0;
    for (int i = 0; i < len; i++) {
        w->ids[i] = t->byte_id[s[i]];
        w->prev[i] = i - 1;
        w->next[i] = i + 1 < len ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < len; i++)
        try_pair(t, w, i);
    while (w->n_heap) {
        struct hent h = heap_pop(w);
        int i = h.pos, j = w->next[i];
        if (w->ids[i] < 0 || j < 0)
            continue;
        const merge_slot *m = tok_merge_find(t, w->ids[i], w->ids[j]);
        if (!m || m->rank != h.rank)
            continue; /* stale: one side was merged since */
        w->ids[i] = m->id;
        w->ids[j] = -1;
        w->next[i] = w->next[j];
        if (w->next[j] >= 0)
            w->prev[w->next[j]] = i;
        try_pair(t, w, w->prev[i]);
        try_pair(t, w, i);
    }
    for (int i = 0; i >= 0 && len; i = w->next[i])
        if (push_out(ids, n, cap, w->ids[i]))
            return -1;
    return 0;
}

static int encode_segment(const tokenizer *t, bpe_work *w, pcre2_match_data *md, const char *s,
                          size_t len, int **ids, int *n, int *cap)
{
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0)
            return err_set("pre-tokenizer failed at byte %zu (PCRE2 error %d)", pos, rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) /* cannot happen with this pattern; never loop forever */
            return err_set("pre-tokenizer made no progress at byte %zu", pos);
        if (ov[1] - ov[0] > INT_MAX / 4)
            return err_set("pre-token of %zu bytes is too long", (size_t)(ov[1] - ov[0]));
        if (bpe(t, w, (const unsigned char *)s + ov[0], (int)(ov[1] - ov[0]), ids, n, cap))
            return -1;
        pos = ov[1];
    }
    return 0;
}

/* Copies text with every invalid UTF-8 subpart replaced by U+FFFD. */
static char *sanitize(const char *text, size_t len, size_t *out_len)
{
    if (len > (SIZE_MAX - 1) / 3) {
        err_set("text too long");
        return NULL;
    }
    char *out = err_malloc(len * 3 + 1, "tokenizer input");
    if (!out)
        return NULL;
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        int k = tok_utf8_step(s + i, len - i);
        if (k > 0) {
            memcpy(out + o, s + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
            continue;
        }
        size_t bad = k == 0 ? len - i : (size_t)-k;
        o += (size_t)tok_utf8_put(out + o, 0xfffd);
        i += bad;
    }
    *out_len = o;
    return out;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int allow_special, int **ids,
               int *n, int *cap)
{
    size_t clen;
    char *clean = sanitize(text, len, &clen);
    if (!clean)
        return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
    bpe_work w = {0};
    int rc = md ? 0 : err_set("out of memory while tokenizing");
    size_t start = 0;
    while (!rc && start <= clen) {
        char *sp = allow_special && t->eos >= 0
                       ? memmem(clean + start, clen - start, TOK_EOS_TEXT, sizeof TOK_EOS_TEXT - 1)
                       : NULL;
        size_t end = sp ? (size_t)(sp - clean) : clen;
        rc = encode_segment(t, &w, md, clean + start, end - start, ids, n, cap);
        if (!rc && sp)
            rc = push_out(ids, n, cap, t->eos);
        if (!sp)
            break;
        start = end + sizeof TOK_EOS_TEXT - 1;
    }
    free(w.ids);
    free(w.heap);
    pcre2_match_data_free(md);
    free(clean);
    return rc;
}

/* ---- streaming decode ---- */
