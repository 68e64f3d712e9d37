#include "pytorch.h"

#include <stdlib.h>
#include <string.h>

#include "../kernels/err.h"
#include "pickle.h"
#include "pytorch_internal.h"

/* Everything a state dict may name: PyTorch's own safe loader (weights_only) allows about as much.
 */
const char *const PT_ALLOWED[] = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch.FloatStorage",
    "torch.HalfStorage",
    "torch.BFloat16Storage",
    "torch.DoubleStorage",
    "torch.LongStorage",
    "torch.IntStorage",
    "torch.ShortStorage",
    "torch.CharStorage",
    "torch.ByteStorage",
    "torch.BoolStorage",
    NULL,
};

const pt_type PT_TYPES[] = {
    {"torch.FloatStorage", "F32", 4},     {"torch.HalfStorage", "F16", 2},
    {"torch.BFloat16Storage", "BF16", 2}, {"torch.DoubleStorage", "F64", 8},
    {"torch.LongStorage", "I64", 8},      {"torch.IntStorage", "I32", 4},
    {"torch.ShortStorage", "I16", 2},     {"torch.CharStorage", "I8", 1},
    {"torch.ByteStorage", "U8", 1},       {"torch.BoolStorage", "BOOL", 1},
};

static int is_int(const pk_value *v) { return v && v->kind == PK_INT; }

static int printable(const char *s, size_t n)
{
    if (!n || n > MAX_NAME)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* ('storage', <storage type>, key, location, numel[, view_metadata]) */
static int read_storage(state *st, const pk_value *pid, size_t *index)
{
    const pk_value *id = pid->items[0];
    if (id->kind != PK_TUPLE || id->n < 5 || id->n > 6 || !pk_str_is(id->items[0], "storage"))
        return err_set("a persistent id is not a ('storage', type, key, location, size) tuple");
    const pk_value *type = id->items[1], *key = id->items[2], *numel = id->items[4];
    if (type->kind != PK_GLOBAL || key->kind != PK_STR || !printable(key->s, key->len) ||
        !is_int(numel) || numel->i < 0)
        return err_set("a storage's persistent id has the wrong types");
    if (id->n == 6 && id->items[5]->kind != PK_NONE)
        return err_set("storage '%.*s' is a view of another (torch < 0.4): not supported",
                       (int)key->len, key->s);
    int t = -1;
    for (size_t i = 0; i < sizeof PT_TYPES / sizeof PT_TYPES[0]; i++)
        if (!strcmp(type->s, PT_TYPES[i].storage))
            t = (int)i;
    if (t < 0)
        return err_set("'%s' is not a storage type", type->s);
    if (numel->i > INT64_MAX / 8)
        return err_set("storage '%.*s' claims %lld elements (absurd)", (int)key->len, key->s,
                       (long long)numel->i);
    if (err_grow(&st->s, &st->cap_s, st->n_s + 1, sizeof *st->s, "the checkpoint's storages"))
        return -1;
    st->s[st->n_s] = (storage){.key = key->s, .key_len = key->len, .type = t, .numel = numel->i};
    *index = st->n_s++;
    return 0;
}

static int ints(const pk_value *tuple, int64_t *out, int *n)
{
    if (tuple->kind != PK_TUPLE || tuple->n > ST_MAX_DIMS)
        return -1;
    for (size_t i = 0; i < tuple->n; i++) {
        if (!is_int(tuple->items[i]) || tuple->items[i]->i < 0)
            return -1;
        out[i] = tuple->items[i]->i;
    }
    *n = (int)tuple->n;
    return 0;
}

/* _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[,
 * metadata]), possibly inside _rebuild_parameter(tensor, requires_grad, backward_hooks) */
static int read_tensor(state *st, const pk_value *name, const pk_value *v)
{
    char shown[64];
    snprintf(shown, sizeof shown, "%.*s", (int)(name->len < 60 ? name->len : 60), name->s);
    if (v->kind == PK_CALL && !strcmp(v->items[0]->s, "torch._utils._rebuild_parameter") &&
        v->items[1]->n >= 1)
        v = v->items[1]->items[0];
    if (v->kind != PK_CALL || strcmp(v->items[0]->s, "torch._utils._rebuild_tensor_v2"))
        return err_set("entry '%s' is a %s, not a tensor", shown, pk_kind_name(v->kind));
    const pk_value *args = v->items[1];
    if (args->n < 6 || args->n > 7 || args->items[0]->kind != PK_PID || !is_int(args->items[1]) ||
        args->items[1]->i < 0)
        return err_set("tensor '%s': _rebuild_tensor_v2 has the wrong arguments", shown);
    if (err_grow(&st->t, &st->cap, st->n + 1, sizeof *st->t, "the checkpoint's tensors"))
        return -1;
    tensor *t = &st->t[st->n];
    *t = (tensor){.name = name->s, .name_len = name->len, .offset = args->items[1]->i};
    int nstride;
    if (ints(args->items[2], t->shape, &t->ndim) || ints(args->items[3], t->stride, &nstride) ||
        nstride != t->ndim)
        return err_set(
            "tensor '%s': its size and stride are not matching tuples of at most %d sizes", shown,
            ST_MAX_DIMS);
    if (read_storage(st, args->items[0], &t->storage))
        return err_wrap("tensor '%s'", shown);
    st->n++;
    return 0;
}

int pti_read_state_dict(state *st, const pk_value *root)
{
    if (root->kind != PK_DICT)
        return err_set("the pickle holds a %s, not a state dict", pk_kind_name(root->kind));
    if (root->n > MAX_TENSORS)
        return err_set("the state dict has %zu entries (at most %d)", root->n, MAX_TENSORS);
    for (size_t i = 0; i < root->n; i++) {
        const pk_value *k = root->items[2 * i];
        if (k->kind != PK_STR || !printable(k->s, k->len))
            return err_set("state dict entry %zu's name is not a printable string", i);
        if (read_tensor(st, k, root->items[2 * i + 1]))
            return -1;
    }
    return 0;
}

static int cmp_key(const storage *a, const storage *b)
{
    if (a->key_len != b->key_len)
        return a->key_len < b->key_len ? -1 : 1;
    return memcmp(a->key, b->key, a->key_len);
}

static int by_key(const void *a, const void *b)
{
    const storage *x = a, *y = b;
    int c = cmp_key(x, y);
    return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

/* One storage per key, sorted by key: tensors that share one (a tied LM head, views into one
 * buffer) point to the same entry, which must say the same type and size each time. */
int pti_merge_storages(state *st)
{
    size_t n = st->n_s, m = 0, *to = err_malloc((n ? n : 1) * sizeof *to, "the storage table");
    if (!to)
        return -1;
    for (size_t i = 0; i < n; i++)
        st->s[i].pid = i;
    if (n) /* an empty state dict has no table at all */
        qsort(st->s, n, sizeof *st->s, by_key);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        storage s = st->s[i];
        if (m && !cmp_key(&st->s[m - 1], &s)) {
            if (st->s[m - 1].type != s.type || st->s[m - 1].numel != s.numel)
                rc = err_set("storage '%.*s' is named with two different types or sizes",
                             (int)s.key_len, s.key);
        } else {
            st->s[m++] = s;
        }
        to[s.pid] = m - 1;
    }
    for (size_t i = 0; !rc && i < st->n; i++)
        st->t[i].storage = to[st->t[i].storage];
    st->n_s = m;
    free(to);
    return rc;
}

static storage *find_storage(state *st, const pk_value *key)
{
    storage want = {.key = key->s, .key_len = key->len};
    size_t lo = 0, hi = st->n_s;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_key(&st->s[mid], &want);
        if (!c)
            return &st->s[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

size_t pti_storage_bytes(const storage *s) { return (size_t)s->numel * PT_TYPES[s->type].bytes; }

/* ---- the legacy stream (torch < 1.6) ---- */

static const uint8_t MAGIC[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

/* The next pickle of the stream at *pos, which moves past it. */
static int next_pickle(const uint8_t *buf, size_t len, size_t *pos, pk_arena **a,
                       const pk_value **v, const char *what)
{
    size_t used;
    if (pk_load(a, buf + *pos, len - *pos, &used, PT_ALLOWED, v))
        return err_wrap("%s", what);
    *pos += used;
    return 0;
}

/* The magic number (i 0), the protocol version (1) and the system info (2) before the state dict.
 */
static int header_ok(int i, const pk_value *v)
{
    const pk_value *le = pk_dict_get(v, "little_endian");
    return i == 0 ? v->kind == PK_BIGINT && v->len == sizeof MAGIC &&
                        !memcmp(v->s, MAGIC, sizeof MAGIC)
           : i == 1 ? is_int(v) && v->i == 1001
                    : v->kind == PK_DICT && (!le || (le->kind == PK_BOOL && le->i));
}

static int parse_legacy(st_file *f, state *st, const uint8_t *buf, size_t len, pk_arena **arena)
{
    static const char *const what[] = {"the magic number", "the protocol version",
                                       "the system info"};
    static const char *const bad[] = {
        "not a PyTorch checkpoint (no magic number)", "legacy protocol version is not 1001",
        "the checkpoint was written big-endian or without system info"};
    size_t pos = 0;
    const pk_value *v, *keys = NULL;
    pk_arena *tmp = NULL;
    int rc = -1;
    for (int i = 0; i < 3; i++) {
        if (next_pickle(buf, len, &pos, &tmp, &v, what[i]))
            return -1;
        int ok = header_ok(i, v);
        pk_free(tmp);
        tmp = NULL;
        if (!ok)
            return err_set("%s", bad[i]);
    }
    if (next_pickle(buf, len, &pos, arena, &v, "the state dict") || pti_read_state_dict(st, v) ||
        pti_merge_storages(st) || next_pickle(buf, len, &pos, &tmp, &keys, "the storage keys"))
        return -1;
    if (keys->kind != PK_LIST) {
        err_set("the storage keys are not a list");
        goto out;
    }
    /* the storages follow in the keys' order, each an 8-byte element count and its bytes */
    for (size_t i = 0; i < keys->n; i++) {
        const pk_value *k = keys->items[i];
        storage *s = k->kind == PK_STR ? find_storage(st, k) : NULL;
        if (!s || s->data) {
            err_set("storage key %zu is %s", i, s ? "listed twice" : "not used by any tensor");
            goto out;
        }
        if (len - pos < 8) {
            err_set("storage '%.*s' is cut off (truncated file?)", (int)s->key_len, s->key);
            goto out;
        }
        uint64_t count = 0;
        for (int b = 7; b >= 0; b--)
            count = count << 8 | buf[pos + b];
        pos += 8;
        size_t bytes = pti_storage_bytes(s);
        if (count != (uint64_t)s->numel) {
            err_set("storage '%.*s' holds %llu elements where the tensors' table says %lld",
                    (int)s->key_len, s->key, (unsigned long long)count, (long long)s->numel);
            goto out;
        }
        if (bytes > len - pos) {
            err_set("storage '%.*s' runs past the end of the file (truncated?)", (int)s->key_len,
                    s->key);
            goto out;
        }
        s->data = buf + pos;
        if ((uintptr_t)s->data %
            PT_TYPES[s->type].bytes) { /* the stream packs storages at any byte */
            void *copy = err_malloc(bytes ? bytes : 1, "an unaligned storage");
            if (!copy || st_own(f, copy))
                goto out;
            s->data = memcpy(copy, s->data, bytes);
        }
        pos += bytes;
    }
    for (size_t j = 0; j < st->n_s; j++)
        if (!st->s[j].data) {
            err_set("storage '%.*s' is not in the file", (int)st->s[j].key_len, st->s[j].key);
            goto out;
        }
    rc = 0;
out:
    pk_free(tmp);
    return rc;
}

/* ---- tensors out of storages ---- */

/* The tensor's elements in row-major order: in place when its strides already are, else gathered.
 */
static int place_tensor(st_file *f, const state *st, const tensor *t, st_tensor *out)
{
    const storage *s = &st->s[t->storage];
    size_t es = (size_t)PT_TYPES[s->type].bytes;
    uint64_t count = 1, last = (uint64_t)t->offset, expect = 1;
    int contiguous = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] && count > UINT64_MAX / (uint64_t)t->shape[d])
            count = UINT64_MAX;
        else
            count *= (uint64_t)t->shape[d];
        if (t->shape[d] > 1 && (uint64_t)t->stride[d] != expect)
            contiguous = 0;
        if (t->shape[d] && expect <= UINT64_MAX / (uint64_t)t->shape[d])
            expect *= (uint64_t)t->shape[d];
    }
    for (int d = 0; count && d < t->ndim; d++) {
        uint64_t reach = (uint64_t)(t->shape[d] - 1);
        if (t->stride[d] && reach > (UINT64_MAX - last) / (uint64_t)t->stride[d])
            last = UINT64_MAX;
        else
            last += reach * (uint64_t)t->stride[d];
    }
    if (count && (count == UINT64_MAX || last >= (uint64_t)s->numel))
        return err_set("tensor '%.*s' reaches element %llu of storage '%.*s', which holds %lld",
                       (int)t->name_len, t->name, (unsigned long long)last, (int)s->key_len, s->key,
                       (long long)s->numel);
    if (count >
        (uint64_t)
            s->numel) /* strides that overlap (an expanded view): gathering would multiply it */
        return err_set("tensor '%.*s' has %llu elements in a storage of %lld (overlapping strides)",
                       (int)t->name_len, t->name, (unsigned long long)count, (long long)s->numel);
    *out = (st_tensor){.ndim = t->ndim, .end = count * es};
    snprintf(out->dtype, sizeof out->dtype, "%s", PT_TYPES[s->type].dtype);
    memcpy(out->shape, t->shape, sizeof t->shape);
    if (!(out->name = strndup(t->name, t->name_len)))
        return err_set("out of memory");
    if (contiguous || !count) {
        out->data = count ? s->data + (size_t)t->offset * es : s->data;
        return 0;
    }
    uint8_t *dst = err_malloc(count * es, "a strided tensor's copy");
    if (!dst || st_own(f, dst))
        return -1;
    int64_t idx[ST_MAX_DIMS] = {0};
    for (uint64_t i = 0; i < count; i++) {
        uint64_t at = (uint64_t)t->offset;
        for (int d = 0; d < t->ndim; d++)
            at += (uint64_t)idx[d] * (uint64_t)t->stride[d];
        memcpy(dst + i * es, s->data + at * es, es);
        for (int d = t->ndim - 1; d >= 0 && ++idx[d] == t->shape[d]; d--)
            idx[d] = 0;
    }
    out->data = dst;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

int pt_parse(st_file *f, const uint8_t *buf, size_t len)
{
    memset(f, 0, sizeof *f);
    state st = {0};
    pk_arena *arena = NULL;
    int rc;
    if (!len)
        rc = err_set("empty file");
    else if (len >= 4 && !memcmp(buf, "PK\x03\x04", 4))
        rc = pti_parse_zip(f, &st, buf, len, &arena);
    else if (len >= 2 && buf[0] == 0x80)
        rc = parse_legacy(f, &st, buf, len, &arena);
    else
        rc = err_set("not a PyTorch checkpoint: neither a zip archive nor a pickle stream");
    if (!rc && !(f->tensors = err_calloc(st.n ? st.n : 1, sizeof *f->tensors, "the tensor index")))
        rc = -1;
    for (size_t i = 0; !rc && i < st.n; i++) {
        rc = place_tensor(f, &st, &st.t[i], &f->tensors[i]);
        f->n_tensors += !rc;
    }
    if (!rc) {
        qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, by_name);
        for (int i = 1; !rc && i < f->n_tensors; i++)
            if (!strcmp(f->tensors[i - 1].name, f->tensors[i].name))
                rc = err_set("tensor '%s' appears twice", f->tensors[i].name);
    }
    pk_free(arena);
    free(st.t);
    free(st.s);
    if (rc)
        st_close(f);
    return rc;
}

int pt_open(st_file *f, const char *path) { return st_map(f, path, pt_parse); }
