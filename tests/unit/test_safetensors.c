/* The header validation rules, one malformed file per rule. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/safetensors.h"
#include "check.h"

/* header JSON + `data` bytes of payload, with an explicit length field when hdr_len != 0 */
static uint8_t *make(const char *json, size_t data, uint64_t hdr_len, size_t *len)
{
    size_t n = strlen(json);
    *len = 8 + n + data;
    uint8_t *b = calloc(1, *len);
    uint64_t h = hdr_len ? hdr_len : n;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(h >> (8 * i));
    memcpy(b + 8, json, n);
    return b;
}

static void expect_error(const char *json, size_t data, uint64_t hdr_len, const char *needle)
{
    size_t len;
    uint8_t *b = make(json, data, hdr_len, &len);
    st_file f;
    int rc = st_parse(&f, b, len);
    CHECK(rc == -1, "accepted: %s", json);
    if (rc == 0)
        st_close(&f);
    else
        CHECK(strstr(err_msg(), needle) != NULL, "error '%s' lacks '%s'", err_msg(), needle);
    free(b);
}

static void valid_file(void)
{
    size_t len;
    uint8_t *b =
        make("{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[2,1],"
             "\"data_offsets\":[8,12]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,"
             "8]}}   ",
             12, 0, &len);
    st_file f;
    CHECK(st_parse(&f, b, len) == 0, "valid file rejected: %s", err_msg());
    const st_tensor *a = st_find(&f, "a"), *bt = st_find(&f, "b");
    CHECK(a && bt && f.n_tensors == 2, "tensors not found");
    if (a && bt) {
        CHECK(a->data == b + len - 12 && bt->data == b + len - 4, "data pointers wrong");
        CHECK(bt->ndim == 2 && bt->shape[0] == 2 && bt->shape[1] == 1 && !strcmp(bt->dtype, "BF16"),
              "shape wrong");
    }
    CHECK(!st_find(&f, "__metadata__"), "metadata is not a tensor");
    st_close(&f);
    free(b);
}

static void rejects_each_rule(void)
{
    expect_error("{}", 0, 100000001, "exceeds");
    expect_error("{}", 0, 50, "past the end");
    expect_error("[1]", 0, 0, "not a JSON object");
    expect_error("{\"a\":", 0, 0, "invalid");
    expect_error("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0,
                 "unknown dtype");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0,
                 "shape x dtype");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, "hole");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                 12, 0, "overlap");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, 0, "cover");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, 0,
                 "past the end of the data");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                 8, 0, "duplicate");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4611686018427387904],"
                 "\"data_offsets\":[0,4]}}",
                 4, 0, "overflow");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0,
                 "non-negative");
    expect_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, "data_offsets");
    expect_error("{\"__metadata__\":{\"k\":1}}", 0, 0, "not a string");
    expect_error("{}x", 0, 0, "trailing");
    size_t len = 4;
    uint8_t tiny[4] = {0};
    st_file f;
    CHECK(st_parse(&f, tiny, len) == -1 && strstr(err_msg(), "too short"), "4-byte file accepted");
}

static int fill(int i, void *buf, void *ctx)
{
    (void)ctx;
    memset(buf, i + 1, 4 * (i + 1));
    return 0;
}

static void write_then_read(void)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/w.safetensors", temp_dir());
    st_entry e[2] = {{.name = "x", .dtype = "F32", .ndim = 1, .shape = {1}, .bytes = 4},
                     {.name = "y", .dtype = "F16", .ndim = 2, .shape = {2, 2}, .bytes = 8}};
    FILE *out = fopen(path, "wb");
    CHECK(out && st_write(out, path, e, 2, fill, NULL) == 0, "write failed: %s", err_msg());
    if (out)
        fclose(out);
    st_file f;
    CHECK(st_open(&f, path) == 0, "reopen failed: %s", err_msg());
    const st_tensor *y = st_find(&f, "y");
    CHECK(y && ((const uint8_t *)y->data)[7] == 2 && y->shape[1] == 2, "content wrong");
    CHECK((f.map_len - 8 - 12) % 8 == 0, "header not padded to 8 bytes");
    st_close(&f);
    char missing[4200]; /* a path of the run's own that nothing made */
    snprintf(missing, sizeof missing, "%s/missing/x.safetensors", temp_dir());
    CHECK(st_open(&f, missing) == -1 && strstr(err_msg(), missing),
          "missing file error does not name it: %s", err_msg());
}

TEST_TABLE(safetensors_tests, {"safetensors/valid_file", valid_file},
           {"safetensors/rejects_each_rule", rejects_each_rule},
           {"safetensors/write_then_read", write_then_read});
