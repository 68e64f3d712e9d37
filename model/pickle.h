/* A restricted pickle reader: the opcodes a PyTorch state dict is written with, globals only from
 * the caller's allowlist, and nothing ever imported or called. A REDUCE becomes a PK_CALL node that
 * the caller interprets (collections.OrderedDict() alone becomes a dict), a persistent id a PK_PID
 * node; the result is a tree of plain values that lives until pk_free. */
#ifndef KVCHAT_PICKLE_H
#define KVCHAT_PICKLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PK_NONE,
    PK_BOOL,
    PK_INT,
    PK_BIGINT,
    PK_FLOAT,
    PK_STR,
    PK_BYTES,
    PK_TUPLE,
    PK_LIST,
    PK_DICT,
    PK_GLOBAL,
    PK_CALL,
    PK_PID,
} pk_kind;

typedef struct pk_value pk_value;
struct pk_value {
    pk_kind kind;
    int64_t i;     /* BOOL, INT */
    double f;      /* FLOAT */
    const char *s; /* STR, BYTES, GLOBAL ("module.name"), BIGINT (little-endian two's complement) */
    size_t len;
    pk_value **items; /* TUPLE, LIST: n items; DICT: n (key, value) pairs, 2n items; CALL: the
                       * global and its arguments' tuple; PID: the id */
    size_t n, cap;
};

typedef struct pk_arena pk_arena;

/* Reads one pickle from buf (up to STOP); *used gets the bytes it took, *root its value. `allowed`
 * is a NULL-terminated list of "module.name" globals; any other global is refused by name. On
 * failure the arena is already freed and *a is NULL. */
int pk_load(pk_arena **a, const uint8_t *buf, size_t len, size_t *used, const char *const *allowed,
            const pk_value **root);
void pk_free(pk_arena *a);

/* Helpers for reading the tree: NULL when the value is not of that shape. */
const pk_value *pk_dict_get(const pk_value *dict, const char *key);
int pk_str_is(const pk_value *v, const char *s);
/* A printable name for a value's kind, for errors. */
const char *pk_kind_name(pk_kind k);

#endif
