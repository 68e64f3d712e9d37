/* What the PyTorch reader's files share (pytorch.c: the state dict, its storages and tensors, the
 * legacy stream; pytorch_zip.c: the zip archive of torch >= 1.6). Nothing else includes it. */
#ifndef KVCHAT_PYTORCH_INTERNAL_H
#define KVCHAT_PYTORCH_INTERNAL_H

#include <stdint.h>

#include "pickle.h"
#include "pytorch.h"

/* A state dict's entries: no checkpoint has near this many, and the bound keeps sorting cheap. */
enum { MAX_TENSORS = 100000, MAX_NAME = 255 };
/* A stored storage that expands beyond this many times its compressed size is a zip bomb: torch
 * stores storages uncompressed, and weights do not compress much. */
enum { MAX_EXPANSION = 100 };
#define MAX_PICKLE (1ull << 30)

typedef struct {
    const char *storage, *dtype;
    int bytes;
} pt_type;
extern const pt_type PT_TYPES[10];     /* the storage types a state dict may hold */
extern const char *const PT_ALLOWED[]; /* the globals a state dict may name, NULL-ended */

typedef struct {
    const char *key; /* in the pickle's bytes */
    size_t key_len;
    int type; /* index in TYPES */
    int64_t numel;
    const uint8_t *data; /* numel elements, once read */
    size_t pid;          /* the persistent id's order, while merging */
} storage;

typedef struct {
    const char *name; /* in the pickle's bytes */
    size_t name_len;
    size_t storage; /* index in the storage table (the pid's index until they are merged) */
    int64_t offset;
    int ndim;
    int64_t shape[ST_MAX_DIMS], stride[ST_MAX_DIMS];
} tensor;

typedef struct {
    tensor *t;
    size_t n, cap;
    storage *s;
    size_t n_s, cap_s;
} state;

/* the tensors and storages the pickle's root (a state dict) names, into st */
int pti_read_state_dict(state *st, const pk_value *root);
/* the storage table sorted by key, one entry a key, the tensors' indices moved with it */
int pti_merge_storages(state *st);
size_t pti_storage_bytes(const storage *s);
/* the zip archive's pickle and storages (buf: the whole file, len bytes) into st */
int pti_parse_zip(st_file *f, state *st, const uint8_t *buf, size_t len, pk_arena **arena);

#endif
