#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../files.h"
#include "fingerprint.h"

static const char MAGIC[8] = {'K', 'V', 'C', 'H', 'A', 'T', 'K', 'V'};
enum { VERSION = 2 }; /* 2: records carry the completed turns and the window's hash */

typedef struct {
    char magic[8];
    uint32_t version, n_convs, dtype, n_layer, n_head, head_dim;
    char fingerprint[16];
} snap_header;

typedef struct {
    int32_t id, len;
    uint32_t turns, pad;
    uint64_t window_hash;
    uint64_t bytes;
} snap_record;

static int put(FILE *f, uint64_t *h, const void *p, size_t n)
{
    *h = fp_hash(*h, p, n);
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

/* what ties a record to one point of the session: the conversation's window and its turn count */
static snap_record describe(engine *e, int id)
{
    int n;
    const int *ids = engine_window(e, id, &n);
    kv_seq *s = engine_conv_cache(e, id);
    return (snap_record){.id = id,
                         .len = n,
                         .turns = (uint32_t)engine_turns_done(e, id),
                         .window_hash = fp_hash(0, ids, sizeof *ids * (size_t)n),
                         .bytes = kv_rows_bytes(s, n)};
}

int snapshot_save(const char *path, engine *e, const loaded_model *lm, const char *fingerprint)
{
    part_file out;
    if (part_open(&out, path))
        return err_wrap("--save-cache");
    FILE *f = out.f;
    const gpt2_config *c = &lm->model.cfg;
    int n = 0;
    for (int i = 0; i < engine_conv_count(e); i++)
        n += engine_turns_done(e, engine_conv_id(e, i)) > 0;
    snap_header h = {.version = VERSION,
                     .n_convs = (uint32_t)n,
                     .dtype = kv_pool_opts(lm->pool)->type,
                     .n_layer = (uint32_t)c->n_layer,
                     .n_head = (uint32_t)c->n_head,
                     .head_dim = (uint32_t)(c->n_embd / c->n_head)};
    memcpy(h.magic, MAGIC, 8);
    memcpy(h.fingerprint, fingerprint, 16);
    uint64_t sum = 0;
    int rc = put(f, &sum, &h, sizeof h);
    /* the conversations a resume restores: those with a completed turn */
    for (int i = 0; i < engine_conv_count(e) && !rc; i++) {
        int id = engine_conv_id(e, i);
        if (!engine_turns_done(e, id))
            continue;
        kv_seq *s = engine_conv_cache(e, id);
        snap_record r = describe(e, id);
        if (kv_len(s) != r.len || kv_export_bytes(s) != r.bytes) {
            rc = err_set("--save-cache %s: conversation %d's cache does not hold its window", path,
                         id);
            break;
        }
        void *rows = malloc(r.bytes ? r.bytes : 1);
        rc = !rows || kv_export(s, rows) || put(f, &sum, &r, sizeof r) ||
             put(f, &sum, rows, r.bytes);
        free(rows);
    }
    if (!rc)
        rc = fwrite(&sum, sizeof sum, 1, f) != 1;
    if (part_commit(&out, !rc))
        return rc ? err_set("--save-cache %s: cannot write", path) : err_wrap("--save-cache");
    return 0;
}

/* header checks that need no more than the header: what made it, and for which model and cache */
static int check_header(const snap_header *h, const char *path, const loaded_model *lm,
                        const char *fingerprint)
{
    const gpt2_config *c = &lm->model.cfg;
    if (memcmp(h->magic, MAGIC, 8))
        return err_set("%s: not a kvchat KV snapshot", path);
    if (h->version != VERSION)
        return err_set("%s: KV snapshot version %u, this kvchat reads version %d", path, h->version,
                       VERSION);
    if (memcmp(h->fingerprint, fingerprint, 16) || h->n_layer != (uint32_t)c->n_layer ||
        h->n_head != (uint32_t)c->n_head || h->head_dim != (uint32_t)(c->n_embd / c->n_head))
        return err_set("%s: made by another model", path);
    if (h->dtype != (uint32_t)kv_pool_opts(lm->pool)->type)
        return err_set("%s: holds a %s cache, this run uses %s", path,
                       h->dtype <= DT_Q8 ? dt_name((dtype)h->dtype) : "unknown",
                       dt_name(kv_pool_opts(lm->pool)->type));
    return 0;
}

int snapshot_load(const char *path, engine *e, const loaded_model *lm, const char *fingerprint)
{
    /* O_NONBLOCK: a FIFO in its place must not hang the resume */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return err_set("%s: %s", path, strerror(errno));
    struct stat sb;
    char *buf = NULL;
    int rc = -1;
    snap_header h;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        err_set("%s: not a regular file", path);
        goto out;
    }
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        err_set("%s: too short for a KV snapshot", path);
        goto out;
    }
    if (check_header(&h, path, lm, fingerprint))
        goto out;
    /* the size the session's windows need, before reading anything large */
    int n = engine_conv_count(e);
    uint64_t want_size = sizeof h + sizeof(uint64_t);
    for (int i = 0; i < n; i++)
        want_size += sizeof(snap_record) + describe(e, engine_conv_id(e, i)).bytes;
    if (h.n_convs != (uint32_t)n || (uint64_t)sb.st_size != want_size) {
        err_set("%s: holds %u conversations in %lld bytes; the session has %d needing %llu bytes "
                "(a stale or damaged "
                "snapshot)",
                path, h.n_convs, (long long)sb.st_size, n, (unsigned long long)want_size);
        goto out;
    }
    size_t size = (size_t)sb.st_size, body = size - 8;
    if (!(buf = malloc(size)) || pread(fd, buf, size, 0) != (ssize_t)size) {
        err_set("%s: cannot read: %s", path, buf ? strerror(errno) : "out of memory");
        goto out;
    }
    uint64_t want_sum;
    memcpy(&want_sum, buf + body, 8);
    if (fp_hash(0, buf, body) != want_sum) {
        err_set("%s: checksum mismatch (the snapshot is damaged)", path);
        goto out;
    }
    size_t pos = sizeof h;
    for (int i = 0; i < n; i++) {
        snap_record r, want;
        memcpy(&r, buf + pos, sizeof r);
        pos += sizeof r;
        if (engine_window_len(e, r.id) < 0) {
            err_set("%s: holds conversation %d, which the session does not", path, r.id);
            goto out;
        }
        want = describe(e, r.id);
        if (r.len != want.len || r.turns != want.turns || r.window_hash != want.window_hash ||
            r.bytes != want.bytes || r.bytes > body - pos) {
            err_set(
                "%s: conversation %d was taken at another point of the session (a stale snapshot)",
                path, r.id);
            goto out;
        }
        kv_seq *s = engine_conv_cache(e, r.id);
        if (kv_len(s) == 0 && kv_import(s, buf + pos, r.len)) {
            err_wrap("%s: conversation %d (a damaged or forged snapshot)", path, r.id);
            goto out;
        }
        pos += r.bytes;
    }
    rc = 0;
out:
    free(buf);
    close(fd);
    return rc;
}

int snapshot_follow(const char *path, int save, engine *e, const loaded_model *lm,
                    const char *fingerprint)
{
    if (save)
        return snapshot_save(path, e, lm, fingerprint);
    if (unlink(path) && errno != ENOENT)
        return err_set("%s: a stale KV snapshot that cannot be removed: %s", path, strerror(errno));
    return 0;
}

void snapshot_remove_part(const char *path)
{
    char part[PATH_MAX];
    if (snprintf(part, sizeof part, "%s.part", path) < (int)sizeof part)
        unlink(part);
}
