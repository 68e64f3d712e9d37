/* libFuzzer target: any bytes through encode (both special modes), then the ids back through the
 * streaming decoder, whose output must always be valid UTF-8 and, for valid input, the input
 * itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../model/tokenizer.h"

#ifndef KVCHAT_ASSETS
#define KVCHAT_ASSETS "assets"
#endif

static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = tok_utf8_step(s + i, n - i);
        if (k <= 0)
            return 0;
        i += (size_t)k;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tokenizer *t;
    if (!t && !(t = tok_load(KVCHAT_ASSETS "/vocab.json", KVCHAT_ASSETS "/merges.txt")))
        abort();
    for (int special = 0; special < 2; special++) {
        int *ids = NULL, n = 0, cap = 0;
        if (tok_encode(t, (const char *)data, size, special, &ids, &n, &cap))
            abort();
        tok_stream s;
        tok_stream_init(&s, t);
        char *out = malloc(size * 3 + 16);
        size_t o = 0, k;
        for (int i = 0; i < n; i++) {
            const char *p = tok_stream_push(&s, ids[i], &k);
            if (!valid_utf8((const unsigned char *)p, k))
                abort();
            memcpy(out + o, p, k);
            o += k;
        }
        const char *p = tok_stream_flush(&s, &k);
        memcpy(out + o, p, k);
        o += k;
        if (!valid_utf8((const unsigned char *)out, o))
            abort();
        if (valid_utf8(data, size) && (o != size || memcmp(out, data, size)))
            abort(); /* valid text must round-trip exactly */
        free(out);
        tok_stream_free(&s);
        free(ids);
    }
    return 0;
}
