#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kernels/err.h"

#define ST_MAX_HEADER 100000000ull

static int dtype_bytes(const char *s)
{
    static const struct {
        const char *name;
        int bytes;
    } known[] = {
        {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
        {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
        {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(s, known[i].name))
            return known[i].bytes;
    return 0;
}

static int parse_entry(st_tensor *t, const char *name, json_t *v)
{
    if (!json_is_object(v))
        return err_set("tensor '%s': entry is not an object", name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return err_set("tensor '%s': needs string 'dtype', array 'shape' and array 'data_offsets'",
                       name);
    int bytes = dtype_bytes(json_string_value(dt));
    if (!bytes)
        return err_set("tensor '%s': unknown dtype '%.12s'", name, json_string_value(dt));
    snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
    size_t nd = json_array_size(shape);
    if (nd > ST_MAX_DIMS)
        return err_set("tensor '%s': %zu dimensions (at most %d supported)", name, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t count = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return err_set("tensor '%s': shape entries must be non-negative integers", name);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] && count > UINT64_MAX / (uint64_t)t->shape[i])
            return err_set("tensor '%s': shape overflows", name);
        count *= (uint64_t)t->shape[i];
    }
    if (json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)) ||
        json_integer_value(json_array_get(offs, 0)) < 0 ||
        json_integer_value(json_array_get(offs, 1)) < 0)
        return err_set("tensor '%s': data_offsets must be two non-negative integers", name);
    t->begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(offs, 1));
    if (t->end < t->begin)
        return err_set("tensor '%s': data_offsets end before they begin", name);
    if (count > UINT64_MAX / (uint64_t)bytes || count * (uint64_t)bytes != t->end - t->begin)
        return err_set("tensor '%s': %llu bytes of data but shape x dtype needs %llu", name,
                       (unsigned long long)(t->end - t->begin),
                       (unsigned long long)(count * bytes));
    t->name = strdup(name);
    if (!t->name)
        return err_set("out of memory");
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

static int check_metadata(json_t *meta)
{
    if (!json_is_object(meta))
        return err_set("__metadata__ is not an object");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v)
    {
        if (!json_is_string(v))
            return err_set("__metadata__ value for '%s' is not a string", k);
    }
    return 0;
}

int st_parse(st_file *f, const uint8_t *buf, size_t len)
{
    memset(f, 0, sizeof *f);
    if (len < 8)
        return err_set("file is %zu bytes, too short for a safetensors header", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    if (n > ST_MAX_HEADER)
        return err_set("header length %llu exceeds the limit of %llu bytes", (unsigned long long)n,
                       ST_MAX_HEADER);
    if (n > len - 8)
        return err_set("header length %llu runs past the end of the file (%zu bytes)",
                       (unsigned long long)n, len);
    if (n < 2 || buf[8] != '{')
        return err_set("header is not a JSON object");
    json_error_t je;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n,
                              JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &je);
    if (!root)
        return err_set("header JSON is invalid at byte %d: %s", je.position, je.text);
    int rc = -1;
    /* JSON_DISABLE_EOF_CHECK stops at the object's end; only space padding may follow it. */
    for (size_t i = je.position; i < n; i++)
        if (buf[8 + i] != ' ') {
            err_set("header has trailing bytes after the JSON object");
            goto out;
        }
    if (!json_is_object(root)) {
        err_set("header is not a JSON object");
        goto out;
    }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    if (!f->tensors) {
        err_set("out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (!strcmp(key, "__metadata__")) {
            if (check_metadata(val))
                goto out;
            continue;
        }
        if (parse_entry(&f->tensors[f->n_tensors], key, val))
            goto out;
        f->n_tensors++;
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_offset);
    uint64_t expect = 0, data_len = len - 8 - n;
    for (int i = 0; i < f->n_tensors; i++) {
        st_tensor *t = &f->tensors[i];
        if (t->begin != expect) {
            err_set("tensor '%s': data_offsets [%llu, %llu] %s", t->name,
                    (unsigned long long)t->begin, (unsigned long long)t->end,
                    t->begin < expect ? "overlap the previous tensor" : "leave a hole");
            goto out;
        }
        if (t->end > data_len) {
            err_set("tensor '%s': data_offsets end %llu past the end of the data (%llu bytes)",
                    t->name, (unsigned long long)t->end, (unsigned long long)data_len);
            goto out;
        }
        t->data = buf + 8 + n + t->begin;
        expect = t->end;
    }
    if (expect != data_len) {
        err_set("data buffer is %llu bytes but the tensors cover %llu",
                (unsigned long long)data_len, (unsigned long long)expect);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    if (rc)
        st_close(f);
    return rc;
}

int st_map(st_file *f, const char *path, int (*parse)(st_file *, const uint8_t *, size_t))
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set("%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        close(fd);
        return err_set("%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set("%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    static const uint8_t none[1];
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0)
                    : (void *)none; /* mmap refuses 0 bytes */
    close(fd);
    if (map == MAP_FAILED)
        return err_set("%s: mmap: %s", path, strerror(errno));
    if (parse(f, map, len)) {
        if (len)
            munmap(map, len);
        return err_wrap("%s", path);
    }
    f->map = len ? map : NULL;
    f->map_len = len;
    return 0;
}

int st_open(st_file *f, const char *path) { return st_map(f, path, st_parse); }

void st_close(st_file *f)
{
    for (int i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_bufs; i++)
        free(f->bufs[i]);
    free(f->bufs);
    if (f->map)
        munmap((void *)f->map, f->map_len);
    memset(f, 0, sizeof *f);
}

int st_own(st_file *f, void *buf)
{
    if (err_grow(&f->bufs, &f->cap_bufs, f->n_bufs + 1, sizeof *f->bufs,
                 "a checkpoint's buffers")) {
        free(buf);
        return -1;
    }
    f->bufs[f->n_bufs++] = buf;
    return 0;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

int st_write(FILE *f, const char *path, const st_entry *e, int n,
             int (*fill)(int i, void *buf, void *ctx), void *ctx)
{
    json_t *root = json_object();
    uint64_t off = 0;
    size_t biggest = 0;
    for (int i = 0; root && i < n; i++) {
        /* what the reader would refuse is never written: a tensor it would take for the metadata,
         * a name JSON cannot hold (not UTF-8), a name twice */
        const char *why = !strcmp(e[i].name, "__metadata__") ? "is the name of the metadata entry"
                          : json_object_get(root, e[i].name) ? "is there twice"
                                                             : NULL;
        if (!why) {
            json_t *shape = json_array();
            for (int d = 0; d < e[i].ndim; d++)
                json_array_append_new(shape, json_integer(e[i].shape[d]));
            json_t *entry =
                json_pack("{s:s, s:o, s:[I, I]}", "dtype", e[i].dtype, "shape", shape,
                          "data_offsets", (json_int_t)off, (json_int_t)(off + e[i].bytes));
            if (json_object_set_new(root, e[i].name, entry))
                why = "is not UTF-8 (or memory ran out)";
        }
        if (why) {
            json_decref(root);
            return err_set("%s: tensor name '%.200s' %s: a safetensors file cannot hold it", path,
                           e[i].name, why);
        }
        off += e[i].bytes;
        biggest = e[i].bytes > biggest ? e[i].bytes : biggest;
    }
    char *hdr = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!hdr)
        return err_set("%s: cannot build the header", path);
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    void *buf = malloc(biggest ? biggest : 1);
    int rc = 0;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    if (!buf)
        rc = err_set("%s: out of memory for a %zu-byte tensor", path, biggest);
    else if (fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hlen, f) != hlen)
        rc = err_set("%s: write failed: %s", path, strerror(errno));
    for (size_t i = hlen; !rc && i < padded; i++)
        fputc(' ', f);
    for (int i = 0; i < n && !rc; i++) {
        if (fill(i, buf, ctx))
            rc = -1;
        else if (fwrite(buf, 1, e[i].bytes, f) != e[i].bytes)
            rc = err_set("%s: write failed: %s", path, strerror(errno));
    }
    free(buf);
    free(hdr);
    return rc;
}
