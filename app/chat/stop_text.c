#include "stop_text.h"

#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"

void stop_init(stop_text *s, const char *stop)
{
    memset(s, 0, sizeof *s);
    s->stop = stop && *stop ? stop : NULL;
}

void stop_free(stop_text *s)
{
    free(s->buf);
    free(s->tok_end);
    memset(s, 0, sizeof *s);
}

static int add(stop_text *s, const char *text, size_t n)
{
    return err_append(&s->buf, &s->len, &s->cap, text, n, "a reply");
}

/* where the stop text starts in the reply, or -1; the reply's first `searched` bytes held none, so
 * only an occurrence that ends in what came after them is looked for */
static long stop_at(const stop_text *s, size_t searched)
{
    size_t k = strlen(s->stop);
    for (size_t i = searched >= k ? searched - k + 1 : 0; s->len >= k && i <= s->len - k; i++)
        if (!memcmp(s->buf + i, s->stop, k))
            return (long)i;
    return -1;
}

int stop_push(stop_text *s, const char *piece, size_t n, int *drop)
{
    *drop = 0;
    size_t before = s->len;
    if (add(s, piece, n) || err_grow(&s->tok_end, &s->cap_tok, (size_t)s->n_tok + 1,
                                     sizeof *s->tok_end, "a reply's token ends"))
        return -1;
    s->tok_end[s->n_tok++] = (int)s->len;
    long at = s->stop ? stop_at(s, before) : -1;
    if (at < 0)
        return 0;
    int keep = 0;
    while (keep < s->n_tok && s->tok_end[keep] <= at)
        keep++;
    *drop = s->n_tok - keep;
    s->n_tok = keep;
    s->len = (size_t)(keep ? s->tok_end[keep - 1] : 0);
    s->buf[s->len] = 0;
    return 1;
}

int stop_finish(stop_text *s, const char *rest, size_t n) { return add(s, rest, n); }

const char *stop_ready(stop_text *s, int final, size_t *n)
{
    size_t safe = s->len;
    /* the longest end of the reply that the stop text begins with waits */
    for (size_t k = s->stop && !final ? strlen(s->stop) - 1 : 0; k > 0; k--)
        if (s->len >= k && !memcmp(s->buf + s->len - k, s->stop, k)) {
            safe = s->len - k;
            break;
        }
    /* and the whole token it starts in: should the stop text follow, that token is taken back */
    if (safe < s->len) {
        int t = s->n_tok;
        while (t > 0 && (size_t)s->tok_end[t - 1] > safe)
            t--;
        safe = t ? (size_t)s->tok_end[t - 1] : 0;
    }
    *n = safe > s->shown ? safe - s->shown : 0;
    const char *at = s->buf ? s->buf + s->shown : "";
    if (safe > s->shown)
        s->shown = safe;
    return at;
}

char *stop_take(stop_text *s)
{
    if (!s->buf && add(s, "", 0))
        return NULL;
    char *r = s->buf;
    s->buf = NULL;
    stop_free(s);
    return r;
}
