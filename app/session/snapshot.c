#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

/* Whose caches a snapshot holds: the conversations' own (FILE), or their drafters' (--draft: FILE
 * with .draft after it), each under its model's fingerprint and shape. */
typedef struct {
    int draft;
    const gpt2_config *cfg;
    dtype kv;
    char fp[17];
} snap_kind;

/* k for the conversations (draft 0) or their model drafters: 1 when there are none to save */
static int kind_of(snap_kind *k, engine *e, const loaded_model *lm, const char *fingerprint,
                   int draft)
{
    *k = (snap_kind){.draft = draft, .cfg = &lm->model.cfg, .kv = kv_pool_opts(lm->pool)->type};
    memcpy(k->fp, fingerprint, 17);
    drafter *d = draft && engine_conv_count(e) ? engine_drafter(e, engine_conv_id(e, 0)) : NULL;
    if (!draft)
        return 0;
    if (!d || !draft_seq(d))
        return 1;
    k->cfg = &draft_model(d)->cfg;
    if (fp_model(draft_dir(d), k->fp)) /* its checkpoint, and the weights it was loaded with */
        return -1;
    uint64_t h = fp_hash(0, k->fp, 16);
    h = fp_hash(h, &draft_model(d)->wtype, sizeof draft_model(d)->wtype);
    snprintf(k->fp, sizeof k->fp, "%016llx", (unsigned long long)h);
    return 0;
}

static kv_seq *cache_of(engine *e, const snap_kind *k, int id)
{
    drafter *d = k->draft ? engine_drafter(e, id) : NULL;
    return k->draft ? (d ? draft_seq(d) : NULL) : engine_conv_cache(e, id);
}

/* what ties a record to one point of the session: the conversation's window (a drafter's cache
 * holds its first len tokens) and its turn count */
static snap_record describe(engine *e, const snap_kind *k, int id, int len)
{
    int n;
    const int *ids = engine_window(e, id, &n);
    return (snap_record){.id = id,
                         .len = len,
                         .turns = (uint32_t)engine_turns_done(e, id),
                         .window_hash = fp_hash(0, ids, sizeof *ids * (size_t)len),
                         .bytes = kv_rows_bytes(cache_of(e, k, id), len)};
}

static int save_kind(const char *path, engine *e, const snap_kind *k)
{
    part_file out;
    if (part_open(&out, path))
        return err_wrap("--save-cache");
    FILE *f = out.f;
    int n = 0;
    for (int i = 0; i < engine_conv_count(e); i++)
        n += engine_turns_done(e, engine_conv_id(e, i)) > 0;
    snap_header h = {.version = VERSION,
                     .n_convs = (uint32_t)n,
                     .dtype = k->kv,
                     .n_layer = (uint32_t)k->cfg->n_layer,
                     .n_head = (uint32_t)k->cfg->n_head,
                     .head_dim = (uint32_t)(k->cfg->n_embd / k->cfg->n_head)};
    memcpy(h.magic, MAGIC, 8);
    memcpy(h.fingerprint, k->fp, 16);
    uint64_t sum = 0;
    int rc = put(f, &sum, &h, sizeof h);
    /* the conversations a resume restores: those with a completed turn */
    for (int i = 0; i < engine_conv_count(e) && !rc; i++) {
        int id = engine_conv_id(e, i), window = engine_window_len(e, id);
        if (!engine_turns_done(e, id))
            continue;
        kv_seq *s = cache_of(e, k, id);
        snap_record r = describe(e, k, id, k->draft ? kv_len(s) : window);
        if (r.len > window || kv_len(s) != r.len || kv_export_bytes(s) != r.bytes) {
            rc = err_set("--save-cache %s: conversation %d's %scache does not hold its window",
                         path, id, k->draft ? "drafter's " : "");
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

/* FILE.draft, beside FILE */
static int draft_path(char *buf, size_t n, const char *path)
{
    return snprintf(buf, n, "%s.draft", path) < (int)n ? 0 : err_set("%s: path too long", path);
}

int snapshot_save(const char *path, engine *e, const loaded_model *lm, const char *fingerprint)
{
    snap_kind k;
    char dpath[PATH_MAX];
    if (save_kind(path, e, (kind_of(&k, e, lm, fingerprint, 0), &k)) ||
        draft_path(dpath, sizeof dpath, path))
        return -1;
    int has = kind_of(&k, e, lm, fingerprint, 1);
    if (has < 0)
        return err_wrap("--save-cache: the drafter");
    if (has > 0 && unlink(dpath) && errno != ENOENT) /* none now: an old one would be stale */
        return err_set("%s: a stale KV snapshot that cannot be removed: %s", dpath,
                       strerror(errno));
    return has ? 0 : save_kind(dpath, e, &k);
}

/* header checks that need no more than the header: what made it, and for which model and cache */
static int check_header(const snap_header *h, const char *path, const snap_kind *k)
{
    if (memcmp(h->magic, MAGIC, 8))
        return err_set("%s: not a kvchat KV snapshot", path);
    if (h->version != VERSION)
        return err_set("%s: KV snapshot version %u, this kvchat reads version %d", path, h->version,
                       VERSION);
    if (memcmp(h->fingerprint, k->fp, 16) || h->n_layer != (uint32_t)k->cfg->n_layer ||
        h->n_head != (uint32_t)k->cfg->n_head ||
        h->head_dim != (uint32_t)(k->cfg->n_embd / k->cfg->n_head))
        return err_set("%s: made by another %smodel", path, k->draft ? "draft " : "");
    if (h->dtype != (uint32_t)k->kv)
        return err_set("%s: holds a %s cache, this run uses %s", path,
                       h->dtype <= DT_Q4 ? dt_name((dtype)h->dtype) : "unknown", dt_name(k->kv));
    return 0;
}

/* the records of buf[pos..body) into the caches; a drafter's holds any prefix of the window */
static int load_records(const char *path, engine *e, const snap_kind *k, const char *buf,
                        size_t pos, size_t body, int n)
{
    for (int i = 0; i < n; i++) {
        snap_record r;
        if (body - pos < sizeof r)
            return err_set("%s: cut short (a damaged snapshot)", path);
        memcpy(&r, buf + pos, sizeof r);
        pos += sizeof r;
        int window = engine_window_len(e, r.id);
        if (window < 0 || !cache_of(e, k, r.id))
            return err_set("%s: holds conversation %d, which the session does not", path, r.id);
        if (r.len < 0 || r.len > window || (!k->draft && r.len != window))
            return err_set("%s: conversation %d was taken at another point of the session (a "
                           "stale snapshot)",
                           path, r.id);
        snap_record want = describe(e, k, r.id, r.len);
        if (r.turns != want.turns || r.window_hash != want.window_hash || r.bytes != want.bytes ||
            r.bytes > body - pos)
            return err_set("%s: conversation %d was taken at another point of the session (a "
                           "stale snapshot)",
                           path, r.id);
        kv_seq *s = cache_of(e, k, r.id);
        int n_ids, rc = 0;
        const int *ids = engine_window(e, r.id, &n_ids);
        if (kv_len(s) == 0)
            rc = k->draft ? draft_import(engine_drafter(e, r.id), ids, r.len, buf + pos)
                          : kv_import(s, buf + pos, r.len);
        if (rc)
            return err_wrap("%s: conversation %d (a damaged or forged snapshot)", path, r.id);
        pos += r.bytes;
    }
    return pos == body ? 0 : err_set("%s: bytes past its records (a damaged snapshot)", path);
}

static int load_kind(const char *path, engine *e, const snap_kind *k)
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
    if (check_header(&h, path, k))
        goto out;
    /* the most the session's windows can need, before reading anything large: exactly that for
     * the conversations' caches */
    int n = engine_conv_count(e);
    uint64_t want_size = sizeof h + sizeof(uint64_t);
    for (int i = 0; i < n; i++) {
        int id = engine_conv_id(e, i);
        want_size += sizeof(snap_record) + describe(e, k, id, engine_window_len(e, id)).bytes;
    }
    if (h.n_convs != (uint32_t)n || (uint64_t)sb.st_size > want_size ||
        (!k->draft && (uint64_t)sb.st_size != want_size) ||
        (uint64_t)sb.st_size < sizeof h + sizeof(uint64_t)) {
        err_set("%s: holds %u conversations in %lld bytes; the session has %d needing %s%llu "
                "bytes (a stale or damaged snapshot)",
                path, h.n_convs, (long long)sb.st_size, n, k->draft ? "at most " : "",
                (unsigned long long)want_size);
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
    rc = load_records(path, e, k, buf, sizeof h, body, n);
out:
    free(buf);
    close(fd);
    return rc;
}

int snapshot_load(const char *path, engine *e, const loaded_model *lm, const char *fingerprint)
{
    snap_kind k;
    kind_of(&k, e, lm, fingerprint, 0);
    return load_kind(path, e, &k);
}

int snapshot_load_drafts(const char *path, engine *e, const loaded_model *lm,
                         const char *fingerprint)
{
    snap_kind k;
    char dpath[PATH_MAX];
    int has = kind_of(&k, e, lm, fingerprint, 1);
    if (has)
        return has < 0 ? err_wrap("the drafter") : 1;
    if (draft_path(dpath, sizeof dpath, path))
        return -1;
    if (access(dpath, F_OK))
        return 1;
    return load_kind(dpath, e, &k);
}

int snapshot_follow(const char *path, int save, engine *e, const loaded_model *lm,
                    const char *fingerprint)
{
    char dpath[PATH_MAX];
    if (save)
        return snapshot_save(path, e, lm, fingerprint);
    for (int i = 0; i < 2; i++) {
        const char *p = i ? dpath : path;
        if (i && draft_path(dpath, sizeof dpath, path))
            return -1;
        if (unlink(p) && errno != ENOENT)
            return err_set("%s: a stale KV snapshot that cannot be removed: %s", p,
                           strerror(errno));
    }
    return 0;
}

void snapshot_remove_part(const char *path)
{
    char part[PATH_MAX];
    if (snprintf(part, sizeof part, "%s.part", path) < (int)sizeof part)
        unlink(part);
    if (snprintf(part, sizeof part, "%s.draft.part", path) < (int)sizeof part)
        unlink(part);
}
