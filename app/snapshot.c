#include "snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"
#include "files.h"
#include "fingerprint.h"

static const char MAGIC[8] = {'K', 'V', 'C', 'H', 'A', 'T', 'K', 'V'};

typedef struct {
    char magic[8];
    uint32_t version, n_convs, dtype, n_layer, n_head, head_dim;
    char fingerprint[16];
} snap_header;

typedef struct {
    int32_t id, len;
    uint64_t bytes;
} snap_record;

static int put(FILE *f, uint64_t *h, const void *p, size_t n)
{
    *h = fp_hash(*h, p, n);
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int snapshot_save(const char *path, engine *e, const loaded_model *lm, const char *fingerprint)
{
    part_file out;
    if (part_open(&out, path))
        return err_wrap("--save-cache");
    FILE *f = out.f;
    const gpt2_config *c = &lm->model.cfg;
    snap_header h = {.version = 1, .n_convs = (uint32_t)engine_conv_count(e), .dtype = kv_pool_opts(lm->pool)->type,
                     .n_layer = (uint32_t)c->n_layer, .n_head = (uint32_t)c->n_head, .head_dim = (uint32_t)(c->n_embd / c->n_head)};
    memcpy(h.magic, MAGIC, 8);
    memcpy(h.fingerprint, fingerprint, 16);
    uint64_t sum = 0;
    int rc = put(f, &sum, &h, sizeof h);
    for (int i = 0; i < engine_conv_count(e) && !rc; i++) {
        int id = engine_conv_id(e, i);
        kv_seq *s = engine_conv_cache(e, id);
        snap_record r = {.id = id, .len = kv_len(s), .bytes = kv_export_bytes(s)};
        void *rows = malloc(r.bytes ? r.bytes : 1);
        rc = !rows || kv_export(s, rows) || put(f, &sum, &r, sizeof r) || put(f, &sum, rows, r.bytes);
        free(rows);
    }
    if (!rc)
        rc = fwrite(&sum, sizeof sum, 1, f) != 1;
    if (part_commit(&out, !rc))
        return rc ? err_set("--save-cache %s: cannot write", path) : err_wrap("--save-cache");
    return 0;
}

int snapshot_load(const char *path, engine *e, const loaded_model *lm, const char *fingerprint)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set("%s: %s", path, strerror(errno));
    fseeko(f, 0, SEEK_END);
    off_t size = ftello(f);
    fseeko(f, 0, SEEK_SET);
    char *buf = size > (off_t)(sizeof(snap_header) + 8) && size < ((off_t)1 << 40) ? malloc((size_t)size) : NULL;
    int rc = -1;
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        err_set("%s: unreadable or too short for a KV snapshot", path);
        goto out;
    }
    size_t body = (size_t)size - 8;
    uint64_t want, got = fp_hash(0, buf, body);
    memcpy(&want, buf + body, 8);
    snap_header h;
    memcpy(&h, buf, sizeof h);
    const gpt2_config *c = &lm->model.cfg;
    if (memcmp(h.magic, MAGIC, 8) || h.version != 1) {
        err_set("%s: not a kvchat KV snapshot", path);
        goto out;
    }
    if (got != want) {
        err_set("%s: checksum mismatch (the snapshot is damaged)", path);
        goto out;
    }
    if (memcmp(h.fingerprint, fingerprint, 16) || h.n_layer != (uint32_t)c->n_layer || h.n_head != (uint32_t)c->n_head ||
        h.head_dim != (uint32_t)(c->n_embd / c->n_head)) {
        err_set("%s: made by another model", path);
        goto out;
    }
    if (h.dtype != (uint32_t)kv_pool_opts(lm->pool)->type) {
        err_set("%s: holds a %s cache, this run uses %s", path, h.dtype <= DT_I8 ? dt_name((dtype)h.dtype) : "unknown",
                dt_name(kv_pool_opts(lm->pool)->type));
        goto out;
    }
    size_t pos = sizeof h;
    for (uint32_t i = 0; i < h.n_convs; i++) {
        snap_record r;
        if (pos + sizeof r > body) {
            err_set("%s: cut short", path);
            goto out;
        }
        memcpy(&r, buf + pos, sizeof r);
        pos += sizeof r;
        kv_seq *s = engine_conv_cache(e, r.id);
        if (r.bytes > body - pos || !s || r.len < 0 || r.len != engine_window_len(e, r.id) ||
            kv_rows_bytes(s, r.len) != r.bytes) {
            err_set("%s: conversation %d does not match the session", path, r.id);
            goto out;
        }
        if (kv_len(s) == 0 && kv_import(s, buf + pos, r.len))
            goto out;
        pos += r.bytes;
    }
    rc = 0;
out:
    free(buf);
    fclose(f);
    return rc;
}
