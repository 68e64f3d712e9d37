/* Known GPT-2 ids (from the reference tokenizer), decoding, streaming and invalid input. The corpus
 * comparison against an independent Python encoder lives in tests/test_tokenizer.sh. */
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/tokenizer.h"
#include "check.h"

static tokenizer *tok(void)
{
    static tokenizer *t;
    if (!t)
        t = tok_load(asset("vocab.json"), asset("merges.txt"));
    return t;
}

static int encode(const char *s, size_t len, int special, int *out, int max)
{
    int *ids = NULL, n = 0, cap = 0;
    if (tok_encode(tok(), s, len, special, &ids, &n, &cap))
        return -1;
    for (int i = 0; i < n && i < max; i++)
        out[i] = ids[i];
    free(ids);
    return n;
}

static void expect_ids(const char *s, const int *want, int n_want)
{
    int got[64];
    int n = encode(s, strlen(s), 0, got, 64);
    int same = n == n_want;
    for (int i = 0; same && i < n; i++)
        same = got[i] == want[i];
    CHECK(same, "'%s' -> %d ids, first %d (want %d ids, first %d)", s, n, n > 0 ? got[0] : -1,
          n_want, n_want ? want[0] : -1);
}

static void known_answers(void)
{
    CHECK(tok() != NULL, "cannot load assets: %s", err_msg());
    if (!tok())
        return;
    CHECK(tok_vocab_size(tok()) == 50257 && tok_eos(tok()) == 50256, "vocab %d eos %d",
          tok_vocab_size(tok()), tok_eos(tok()));
    expect_ids("Hello world", (int[]){15496, 995}, 2);
    expect_ids(" Hello world", (int[]){18435, 995}, 2);
    expect_ids("hello world", (int[]){31373, 995}, 2);
    expect_ids("0", (int[]){15}, 1);
    expect_ids("00", (int[]){405}, 1);
    expect_ids("000", (int[]){830}, 1);
    expect_ids("0000", (int[]){2388}, 1);
    expect_ids("000000000", (int[]){10535, 830}, 2);
    expect_ids("", NULL, 0);
    expect_ids("The dog", (int[]){464, 3290}, 2);
}

static char *decode_all(const int *ids, int n, size_t *len)
{
    tok_stream s;
    tok_stream_init(&s, tok());
    char *out = malloc(4096);
    size_t o = 0, k;
    for (int i = 0; i < n; i++) {
        const char *p = tok_stream_push(&s, ids[i], &k);
        /* every piece handed out must be complete UTF-8 */
        for (size_t j = 0; j < k;) {
            int step = tok_utf8_step((const unsigned char *)p + j, k - j);
            CHECK(step > 0, "stream emitted half a character after id %d", ids[i]);
            j += step > 0 ? (size_t)step : k;
        }
        memcpy(out + o, p, k);
        o += k;
    }
    const char *p = tok_stream_flush(&s, &k);
    memcpy(out + o, p, k);
    o += k;
    out[o] = 0;
    tok_stream_free(&s);
    *len = o;
    return out;
}

static void round_trip(void)
{
    static const char *texts[] = {
        "Hello, world! It's a test.",
        "emoji 🙂👍🏽 and ZWJ 👨‍👩‍👧",
        "中文字符和日本語のテキスト",
        "combining: e\xcc\x81 a\xcc\x8a",
        "tabs\tand\r\nnewlines\n\n\n  spaces   ",
        "\x01\x02 control \x7f",
        "x = f(y) + 2*z; // code",
        "Ünïcödé ßtraße",
        "   leading and trailing   ",
        "'s 't 're 've 'm 'll 'd",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int ids[512];
        int n = encode(texts[i], strlen(texts[i]), 0, ids, 512);
        CHECK(n > 0 && n <= 512, "encode failed for '%s'", texts[i]);
        size_t len;
        char *back = decode_all(ids, n, &len);
        CHECK(len == strlen(texts[i]) && !memcmp(back, texts[i], len),
              "round trip changed '%s' to '%s'", texts[i], back);
        free(back);
    }
}

static void invalid_utf8(void)
{
    /* each maximal invalid subpart becomes one U+FFFD, as Python's errors="replace" does */
    int a[16], b[16];
    int na = encode("a\xff"
                    "b\xe2\x82"
                    "c\xed\xa0\x80",
                    9, 0, a, 16);
    const char *want = "a\xef\xbf\xbd"
                       "b\xef\xbf\xbd"
                       "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd";
    int nb = encode(want, strlen(want), 0, b, 16);
    CHECK(na == nb && na > 0 && !memcmp(a, b, sizeof(int) * (size_t)na),
          "replacement differs (%d vs %d ids)", na, nb);
    int c[4];
    CHECK(encode("\xf0\x9f", 2, 0, c, 4) == encode("\xef\xbf\xbd", 3, 0, b, 4),
          "truncated character not replaced");
}

static void streaming_split_character(void)
{
    int ids[16];
    int n = encode("🙂", strlen("🙂"), 0, ids, 16);
    CHECK(n >= 2, "expected the emoji to span several byte tokens, got %d", n);
    tok_stream s;
    tok_stream_init(&s, tok());
    size_t k;
    tok_stream_push(&s, ids[0], &k);
    CHECK(k == 0, "emitted %zu bytes of an incomplete character", k);
    const char *rest = tok_stream_flush(&s, &k);
    CHECK(k == 3 && !memcmp(rest, "\xef\xbf\xbd", 3), "flush of a partial character is not U+FFFD");
    tok_stream_free(&s);
}

static void special_token(void)
{
    int ids[32];
    const char *s = "a<|endoftext|>b";
    int n = encode(s, strlen(s), 1, ids, 32);
    CHECK(n == 3 && ids[1] == 50256, "special: got %d ids (middle %d)", n, n > 1 ? ids[1] : -1);
    n = encode(s, strlen(s), 0, ids, 32);
    int has = 0;
    for (int i = 0; i < n; i++)
        has |= ids[i] == 50256;
    CHECK(n > 3 && !has, "without allow_special the text must stay text");
}

static void long_pretoken(void)
{
    size_t n = 200000;
    char *s = malloc(n);
    memset(s, 'a', n);
    int *ids = NULL, cnt = 0, cap = 0;
    CHECK(tok_encode(tok(), s, n, 0, &ids, &cnt, &cap) == 0 && cnt > 0, "long run failed");
    free(ids);
    free(s);
}

static void bad_files(void)
{
    char v[4200], m[4200];
    snprintf(v, sizeof v, "%s/bad_vocab.json", temp_dir());
    FILE *f = fopen(v, "w");
    fputs("{\"a\": 0, \"b\": \"x\"}", f);
    fclose(f);
    CHECK(!tok_load(v, asset("merges.txt")) && strstr(err_msg(), "bad_vocab.json"), "bad vocab: %s",
          err_msg());
    snprintf(m, sizeof m, "%s/bad_merges.txt", temp_dir());
    f = fopen(m, "w");
    fputs("#version: 0.2\nĠ t\nnot-a-pair\n", f);
    fclose(f);
    CHECK(!tok_load(asset("vocab.json"), m) && strstr(err_msg(), "line 3"), "bad merges: %s",
          err_msg());
    char missing[4200]; /* a path of the run's own that nothing made */
    snprintf(missing, sizeof missing, "%s/missing/vocab.json", temp_dir());
    CHECK(!tok_load(missing, m) && strstr(err_msg(), missing), "missing: %s", err_msg());
}

TEST_TABLE(tokenizer_tests, {"tokenizer/known_answers", known_answers},
           {"tokenizer/round_trip", round_trip}, {"tokenizer/invalid_utf8_replaced", invalid_utf8},
           {"tokenizer/stream_split_character", streaming_split_character},
           {"tokenizer/special_token", special_token}, {"tokenizer/long_pretoken", long_pretoken},
           {"tokenizer/bad_files", bad_files});
