/* The restricted pickle reader against pickles Python's own pickle module wrote (the byte strings
 * below are pickle.dumps output, protocols 2 and 4): the values it builds, sharing through the
 * memo, and each refusal. */
#include <math.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/pickle.h"
#include "check.h"

static const char *const ALLOWED[] = {"collections.OrderedDict", NULL};

#define LOAD(bytes, root) load((const uint8_t *)(bytes), sizeof(bytes) - 1, root)
static pk_arena *load(const uint8_t *b, size_t n, const pk_value **root)
{
    pk_arena *a;
    size_t used = 0;
    if (pk_load(&a, b, n, &used, ALLOWED, root)) {
        CHECK(0, "refused: %s", err_msg());
        return NULL;
    }
    CHECK(used == n, "took %zu of %zu bytes", used, n);
    return a;
}

static int refused(const char *bytes, size_t n, const char *needle)
{
    pk_arena *a;
    const pk_value *root;
    size_t used;
    if (!pk_load(&a, (const uint8_t *)bytes, n, &used, ALLOWED, &root)) {
        pk_free(a);
        return 0;
    }
    return strstr(err_msg(), needle) != NULL;
}

/* [1, -1, -300, 2**70 + 5, -2**40, math.pi, 'abc', b'xy', True, False, None, (1, 2)], protocol 4 */
static const char VALUES4[] =
    "\x80\x04\x95\x41\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28\x4b\x01\x4a\xff\xff\xff\xff\x4a\xd4"
    "\xfe\xff\xff\x8a"
    "\x09\x05\x00\x00\x00\x00\x00\x00\x00\x40\x8a\x06\x00\x00\x00\x00\x00\xff\x47\x40\x09\x21\xfb"
    "\x54\x44\x2d\x18"
    "\x8c\x03\x61\x62\x63\x94\x43\x02\x78\x79\x94\x88\x89\x4e\x4b\x01\x4b\x02\x86\x94\x65\x2e";

static void values(void)
{
    const pk_value *v;
    pk_arena *a = LOAD(VALUES4, &v);
    if (!a)
        return;
    CHECK(v->kind == PK_LIST && v->n == 12, "not a list of 12: %s of %zu", pk_kind_name(v->kind),
          v->n);
    if (v->n == 12) {
        pk_value *const *x = v->items;
        CHECK(x[0]->kind == PK_INT && x[0]->i == 1, "1");
        CHECK(x[1]->kind == PK_INT && x[1]->i == -1, "-1 (BININT)");
        CHECK(x[2]->kind == PK_INT && x[2]->i == -300, "-300");
        CHECK(x[3]->kind == PK_BIGINT && x[3]->len == 9 && (uint8_t)x[3]->s[8] == 0x40 &&
                  x[3]->s[0] == 5,
              "2**70+5 kept as bytes");
        CHECK(x[4]->kind == PK_INT && x[4]->i == -(1ll << 40),
              "-2**40 (LONG1, sign-extended): %lld", (long long)x[4]->i);
        CHECK(x[5]->kind == PK_FLOAT && x[5]->f == M_PI, "pi (BINFLOAT, big-endian)");
        CHECK(pk_str_is(x[6], "abc"), "'abc'");
        CHECK(x[7]->kind == PK_BYTES && x[7]->len == 2 && !memcmp(x[7]->s, "xy", 2), "b'xy'");
        CHECK(x[8]->kind == PK_BOOL && x[8]->i && x[9]->kind == PK_BOOL && !x[9]->i, "True, False");
        CHECK(x[10]->kind == PK_NONE, "None");
        CHECK(x[11]->kind == PK_TUPLE && x[11]->n == 2 && x[11]->items[1]->i == 2, "(1, 2)");
    }
    pk_free(a);
}

static void dicts_and_memo(void)
{
    /* OrderedDict([('a', 1), ('b', [2, 3])]), protocol 2 */
    static const char OD[] =
        "\x80\x02\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65"
        "\x64\x44\x69\x63\x74\x0a\x71\x00\x29\x52\x71\x01\x28\x58\x01\x00\x00\x00\x61\x71\x02"
        "\x4b\x01\x58\x01\x00\x00\x00\x62\x71\x03\x5d\x71\x04\x28\x4b\x02\x4b\x03\x65\x75\x2e";
    const pk_value *v, *b;
    pk_arena *a = LOAD(OD, &v);
    if (a) {
        CHECK(v->kind == PK_DICT && v->n == 2, "OrderedDict() then SETITEMS: a dict of 2");
        CHECK(pk_dict_get(v, "a") && pk_dict_get(v, "a")->i == 1, "a = 1");
        CHECK((b = pk_dict_get(v, "b")) && b->kind == PK_LIST && b->n == 2 && b->items[1]->i == 3,
              "b = [2, 3]");
        CHECK(!pk_dict_get(v, "c"), "no c");
        pk_free(a);
    }
    /* x = [7]; [x, x]: the memo makes both items one list */
    static const char SHARED[] = "\x80\x02\x5d\x71\x00\x28\x5d\x71\x01\x4b\x07\x61\x68\x01\x65\x2e";
    if ((a = LOAD(SHARED, &v))) {
        CHECK(v->n == 2 && v->items[0] == v->items[1] && v->items[0]->n == 1, "[x, x] shares x");
        pk_free(a);
    }
    /* {'k': 1, 'k': 2} written by hand: the later value wins, as in Python */
    static const char TWICE[] = "\x80\x02}(X\x01\x00\x00\x00"
                                "kK\x01X\x01\x00\x00\x00"
                                "kK\x02u.";
    if ((a = LOAD(TWICE, &v))) {
        CHECK(pk_dict_get(v, "k") && pk_dict_get(v, "k")->i == 2, "a repeated key: the last value");
        pk_free(a);
    }
}

static void refusals(void)
{
    /* the same list in protocol 2: its bytes object is pickled as _codecs.encode(...) */
    static const char VALUES2[] =
        "\x80\x02\x5d\x71\x00\x28\x4b\x01\x58\x02\x00\x00\x00\x78\x79\x71\x03\x63\x5f\x63\x6f"
        "\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x02\x65\x2e";
    CHECK(refused(VALUES2, sizeof VALUES2 - 1, "refusing global '_codecs.encode'"),
          "a global off the list: %s", err_msg());
    static const char SYSTEM[] = "\x80\x02"
                                 "cposix\nsystem\nX\x04\x00\x00\x00"
                                 "true\x85R.";
    CHECK(refused(SYSTEM, sizeof SYSTEM - 1, "refusing global 'posix.system'"), "posix.system: %s",
          err_msg());
    static const char STACK_GLOBAL[] = "\x80\x04\x8c\x08"
                                       "builtins\x8c\x04"
                                       "eval\x93.";
    CHECK(refused(STACK_GLOBAL, sizeof STACK_GLOBAL - 1, "refusing global 'builtins.eval'"),
          "STACK_GLOBAL: %s", err_msg());
    static const char CALL_NONGLOBAL[] = "\x80\x02K\x01)R.";
    CHECK(refused(CALL_NONGLOBAL, sizeof CALL_NONGLOBAL - 1, "REDUCE at byte"),
          "REDUCE of an int: %s", err_msg());
    static const char UNDERFLOW[] = "\x80\x02"
                                    "a.";
    CHECK(refused(UNDERFLOW, sizeof UNDERFLOW - 1, "stack underflow"), "APPEND on nothing: %s",
          err_msg());
    static const char APPEND_DICT[] = "\x80\x02}K\x01"
                                      "a.";
    CHECK(refused(APPEND_DICT, sizeof APPEND_DICT - 1, "adds items to a dict"),
          "APPEND to a dict: %s", err_msg());
    static const char TRUNCATED[] = "\x80\x02X\xff\x00\x00\x00"
                                    "ab";
    CHECK(refused(TRUNCATED, sizeof TRUNCATED - 1, "runs past the end"), "a cut string: %s",
          err_msg());
    static const char NO_STOP[] = "\x80\x02K\x01";
    CHECK(refused(NO_STOP, sizeof NO_STOP - 1, "without STOP"), "no STOP: %s", err_msg());
    static const char TWO_LEFT[] = "\x80\x02K\x01K\x02.";
    CHECK(refused(TWO_LEFT, sizeof TWO_LEFT - 1, "not one value"), "two values left: %s",
          err_msg());
    static const char MEMO_MISS[] = "\x80\x02h\x05.";
    CHECK(refused(MEMO_MISS, sizeof MEMO_MISS - 1, "never stored"), "a memo entry never stored: %s",
          err_msg());
    static const char INST[] = "\x80\x02(cos\nsystem\nX\x01\x00\x00\x00"
                               "xo.";
    CHECK(refused(INST, sizeof INST - 1, "refusing global 'os.system'"),
          "OBJ after a refused global: %s", err_msg());
    static const char OBJ[] = "\x80\x02(o.";
    CHECK(refused(OBJ, sizeof OBJ - 1, "opcode 0x6f"), "OBJ is not an opcode a state dict uses: %s",
          err_msg());
}

TEST_TABLE(pickle_tests, {"pickle/values", values}, {"pickle/dicts_and_memo", dicts_and_memo},
           {"pickle/refusals", refusals});
