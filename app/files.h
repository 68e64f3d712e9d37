/* File-system helpers for the commands that write files. */
#ifndef KVCHAT_FILES_H
#define KVCHAT_FILES_H

#include <stddef.h>

/* mkdir -p */
int make_dirs(const char *path);
/* mkdir -p of the folder a file path is in */
int make_parent_dirs(const char *file);
/* ${ENV:-$HOME/FALLBACK}/kvchat/REL (ENV an XDG base directory variable, FALLBACK its default under
 * the home directory); -1 when neither is set, with an error naming both and then `instead`. */
int xdg_path(char *buf, size_t n, const char *env, const char *fallback, const char *rel,
             const char *instead);
/* A file name as a user typed it into a command (/save): a leading ~ is the home folder, as in a
 * shell; its folder must exist (a typo in it is an error, not a new folder). -1 with an error. */
int user_path(char *buf, size_t n, const char *path);
/* Whether both paths name one existing file (links and different spellings included). */
int same_file(const char *a, const char *b);
/* The size of the file at PATH, or -1 when there is none. */
long long file_size(const char *path);
/* Before a file replaces PATH: refused (-1, the error naming PATH) when another process holds PATH
 * locked (a live session or event log: never replaced, forced or not), when it is not a regular
 * file, or when it exists, is not empty and !force (the error ends with `force_hint`). Otherwise
 * *fd holds PATH's lock (-1 when there is no PATH) until the caller closes it after the rename, so
 * that no writer takes the old file meanwhile. */
int file_claim(const char *path, int force, const char *force_hint, int *fd);
#include <limits.h>
#include <stdio.h>

/* A file written whole or not at all: its bytes go to PATH.part, which replaces PATH only once
 * complete and on disk, so a crash or a failed write never leaves a half-written PATH; never over a
 * file another process holds locked (a live session or event log). A PATH that is a device or a
 * FIFO (/dev/null, /dev/stdout) is written directly: it is never replaced. */
typedef struct {
    FILE *f;
    const char *path;
    char tmp[PATH_MAX];
    int direct;
} part_file;
int part_open(part_file *p, const char *path);
/* ok: flush, fsync and rename into place; otherwise, or when that fails, the part is removed.
 * Returns 0, or -1 with an error naming the file. */
int part_commit(part_file *p, int ok);
/* Before a --dump-logits of rows of `row` bytes replaces PATH: refused when PATH is `input` (the
 * session being verified) or a regular file other than an earlier dump (whole rows). */
int dump_claim(const char *path, long long row, const char *input);
/* All of stream f, its length in *len; NULL (with an error naming `what`) on a failure to read
 * or to allocate. */
char *read_all(FILE *f, size_t *len, const char *what);
/* The SHA-256 of len bytes, as 64 hex digits */
void sha256_hex(const void *data, size_t len, char hex[65]);
/* Copies src to dst through dst.part. */
int copy_file(const char *src, const char *dst);
/* The folder holding the shipped GPT-2 tokenizer: $KVCHAT_ASSETS, else PREFIX/share/kvchat beside
 * an installed PREFIX/bin/kvchat, else the build's assets/. */
const char *assets_dir(void);
/* Copies the shipped GPT-2 tokenizer file NAME (vocab.json, merges.txt) from $KVCHAT_ASSETS, else
 * the build's assets/ folder, to dst. */
int copy_asset(const char *name, const char *dst);

#endif
