/* safetensors files: memory-mapped, header parsed with jansson, validated the way the reference
 * implementation does before any tensor is touched. */
#ifndef KVCHAT_SAFETENSORS_H
#define KVCHAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    char dtype[12]; /* as written: "F32", "BF16", ... */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets inside the data buffer */
    const void *data;    /* points into the mapping */
} st_tensor;

typedef struct {
    st_tensor *tensors;
    int n_tensors;
    const uint8_t *map; /* whole file; NULL when parsed from a caller's buffer */
    size_t map_len;
    void **bufs; /* memory another format's reader filled (model/pytorch.h) */
    size_t n_bufs, cap_bufs;
} st_file;

/* Validates and indexes a complete file image held in memory (the fuzz target's entry). */
int st_parse(st_file *f, const uint8_t *buf, size_t len);
/* mmap()s PATH and indexes it with parse (st_parse, or another format's: model/pytorch.h); errors
 * name the file. */
int st_map(st_file *f, const char *path, int (*parse)(st_file *f, const uint8_t *buf, size_t len));
/* st_map with st_parse */
int st_open(st_file *f, const char *path);
void st_close(st_file *f);
/* Hands a malloc'd buffer to f, freed by st_close (freed at once if it cannot be kept). */
int st_own(st_file *f, void *buf);
const st_tensor *st_find(const st_file *f, const char *name);

/* Writing: entries in file order into f (`path` names it in errors); fill(i, buf, ctx) provides
 * entry i's bytes when its turn comes, so a large checkpoint never has to be whole in memory. The
 * caller makes f a part file and renames it into place (app/files.h's part_open). */
typedef struct {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t bytes;
} st_entry;

int st_write(FILE *f, const char *path, const st_entry *e, int n,
             int (*fill)(int i, void *buf, void *ctx), void *ctx);

#endif
