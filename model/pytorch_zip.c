/* The zip archive torch >= 1.6 writes (through libzip): data.pkl, then each storage read whole into
 * memory, a stored one expanding no more than MAX_EXPANSION times its size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "../kernels/err.h"
#include "pytorch_internal.h"

static int zip_fail(zip_t *z, const char *what) { return err_set("%s: %s", what, zip_strerror(z)); }

/* Reads entry `index`, which must expand to exactly `want` bytes (SIZE_MAX: whatever it says, up to
 * MAX_PICKLE), into a buffer f owns. */
static int zip_read(st_file *f, zip_t *z, zip_uint64_t index, const char *name, size_t want,
                    uint8_t **out, size_t *len)
{
    zip_stat_t zs;
    if (zip_stat_index(z, index, 0, &zs))
        return zip_fail(z, name);
    if (!(zs.valid & ZIP_STAT_SIZE) || !(zs.valid & ZIP_STAT_COMP_SIZE))
        return err_set("%s: the archive does not say its size", name);
    if (want == SIZE_MAX ? zs.size > MAX_PICKLE : zs.size != want)
        return err_set("%s: holds %llu bytes where %zu are needed", name,
                       (unsigned long long)zs.size, want);
    if (zs.comp_method != ZIP_CM_STORE && zs.size > MAX_EXPANSION * zs.comp_size + 65536)
        return err_set("%s: %llu bytes compressed to %llu (a zip bomb?)", name,
                       (unsigned long long)zs.size, (unsigned long long)zs.comp_size);
    uint8_t *buf = err_malloc(zs.size ? zs.size : 1, name);
    if (!buf || st_own(f, buf))
        return -1;
    zip_file_t *zf = zip_fopen_index(z, index, 0);
    if (!zf)
        return zip_fail(z, name);
    zip_uint64_t got = 0;
    zip_int64_t r = 1;
    while (got < zs.size && (r = zip_fread(zf, buf + got, zs.size - got)) > 0)
        got += (zip_uint64_t)r;
    uint8_t extra;
    if (r >= 0 && got == zs.size)
        r = zip_fread(zf, &extra, 1); /* reaching the end is when libzip checks the CRC */
    int rc = r < 0                 ? err_set("%s: %s", name, zip_file_strerror(zf))
             : got != zs.size || r ? err_set("%s: the archive ends early (truncated?)", name)
                                   : 0;
    zip_fclose(zf);
    *out = buf;
    *len = (size_t)zs.size;
    return rc;
}

int pti_parse_zip(st_file *f, state *st, const uint8_t *buf, size_t len, pk_arena **arena)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, len, 0, &ze);
    zip_t *z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : NULL;
    if (!z) {
        int rc = err_set("not a readable zip archive: %s", zip_error_strerror(&ze));
        zip_error_fini(&ze);
        if (src)
            zip_source_free(src);
        return rc;
    }
    zip_error_fini(&ze);
    int rc = -1;
    char root[MAX_NAME + 1] = "", name[2 * MAX_NAME + 16];
    zip_int64_t n = zip_get_num_entries(z, 0), pkl = -1;
    for (zip_int64_t i = 0; i < n; i++) {
        const char *e = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW),
                   *slash = e ? strchr(e, '/') : NULL;
        if (slash && !strcmp(slash, "/data.pkl") && (size_t)(slash - e) <= MAX_NAME) {
            snprintf(root, sizeof root, "%.*s", (int)(slash - e), e);
            pkl = i;
            break;
        }
    }
    uint8_t *p;
    size_t plen, used;
    const pk_value *rootv;
    if (pkl < 0) {
        err_set("the archive has no <folder>/data.pkl: not a PyTorch checkpoint");
        goto out;
    }
    snprintf(name, sizeof name, "%s/data.pkl", root);
    if (zip_read(f, z, (zip_uint64_t)pkl, name, SIZE_MAX, &p, &plen) ||
        pk_load(arena, p, plen, &used, PT_ALLOWED, &rootv))
        goto out;
    if (pti_read_state_dict(st, rootv) || pti_merge_storages(st))
        goto out;
    for (size_t i = 0; i < st->n_s; i++) {
        storage *s = &st->s[i];
        snprintf(name, sizeof name, "%s/data/%.*s", root, (int)s->key_len, s->key);
        zip_int64_t idx = zip_name_locate(z, name, ZIP_FL_ENC_RAW);
        size_t got;
        if (idx < 0) {
            err_set("%s: the storage is missing from the archive", name);
            goto out;
        }
        if (zip_read(f, z, (zip_uint64_t)idx, name, pti_storage_bytes(s), (uint8_t **)&s->data,
                     &got))
            goto out;
    }
    rc = 0;
out:
    zip_discard(z);
    return rc;
}
