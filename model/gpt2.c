/* Loading a Hugging Face GPT-2 checkpoint: every tensor found (with or without the "transformer."
 * prefix), checked against the shape config.json implies, and kept in the compute dtype. */
#include "gpt2.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../kernels/err.h"
#include "checkpoint.h"

static int own(gpt2_model *m, void *p)
{
    if (err_grow(&m->owned, &m->cap_owned, m->n_owned + 1, sizeof *m->owned,
                 "the converted weights' list")) {
        free(p);
        return -1;
    }
    m->owned[m->n_owned++] = p;
    return 0;
}

static int file_dtype(const st_tensor *t, dtype *out)
{
    if (!strcmp(t->dtype, "F32"))
        *out = DT_F32;
    else if (!strcmp(t->dtype, "F16"))
        *out = DT_F16;
    else if (!strcmp(t->dtype, "BF16"))
        *out = DT_BF16;
    else
        return err_set("tensor '%s' has dtype %s; kvchat reads F32, F16 and BF16", t->name,
                       t->dtype);
    return 0;
}

static const st_tensor *find(gpt2_model *m, const char *name, int rows, int cols)
{
    char alt[160];
    const st_tensor *t = st_find(&m->st, name);
    if (!t) {
        snprintf(alt, sizeof alt, "transformer.%s", name);
        t = st_find(&m->st, alt);
    }
    if (!t) {
        err_set("tensor '%s' is missing", name);
        return NULL;
    }
    int want_dims = rows ? 2 : 1;
    int64_t want[2] = {rows ? rows : cols, cols};
    int ok = t->ndim == want_dims;
    for (int i = 0; ok && i < want_dims; i++)
        ok = t->shape[i] == want[i];
    if (!ok) {
        char got[128] = "", *p = got;
        for (int i = 0; i < t->ndim && p < got + sizeof got - 24; i++)
            p += sprintf(p, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (rows)
            err_set("tensor '%s' has shape [%s] but config.json implies [%d, %d]", name, got, rows,
                    cols);
        else
            err_set("tensor '%s' has shape [%s] but config.json implies [%d]", name, got, cols);
        return NULL;
    }
    return t;
}

/* -1 (naming the tensor and the place) where t holds an inf or a NaN: a damaged checkpoint, which
 * would turn every later activation into NaN */
static int finite(const st_tensor *t, dtype have, size_t n)
{
    size_t at = dt_first_nonfinite(t->data, have, n);
    return at < n ? err_set("tensor '%s' holds a non-finite value (inf or NaN) at element %zu of "
                            "%zu: the checkpoint is damaged",
                            t->name, at, n)
                  : 0;
}

/* Returns the tensor's data as `want`, in place when the file already holds it aligned. */
static const void *as_type(gpt2_model *m, const st_tensor *t, dtype want)
{
    dtype have;
    if (file_dtype(t, &have))
        return NULL;
    size_t n = (t->end - t->begin) / dt_size(have);
    if (finite(t, have, n))
        return NULL;
    if (have == want && (uintptr_t)t->data % dt_size(want) == 0)
        return t->data;
    void *dst = err_alloc_big(n * dt_size(want) + 128, "a converted tensor");
    if (!dst) {
        err_wrap("converting tensor '%s'", t->name);
        return NULL;
    }
    if (own(m, dst))
        return NULL;
    if (have == want) {
        memcpy(dst, t->data, n * dt_size(want));
        return dst;
    }
    enum { CHUNK = 1 << 16 };
    float *tmp = err_malloc(CHUNK * sizeof(float), "weight conversion");
    if (!tmp)
        return NULL;
    const char *src = t->data;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        if (have == DT_F32)
            memcpy(tmp, src + i * 4, k * 4); /* may be unaligned in the file */
        else
            dt_to_f32(tmp, src + i * 2, have, k);
        dt_from_f32((char *)dst + i * dt_size(want), tmp, want, k);
    }
    free(tmp);
    return dst;
}

/* The tensor [rows, cols] quantised to DT_Q8, DT_Q4 or DT_Q6 along its reduction (kb_mat's
 * layout): by column for a product's weight, by row for the token embedding. Tiles of 32
 * vectors are gathered in f32 first, reading the file in order, as as_type converts. */
static int quantize(gpt2_model *m, kb_mat *out, const st_tensor *t, int rows, int cols,
                    int by_column, dtype qt)
{
    dtype have;
    int K = by_column ? rows : cols, V = by_column ? cols : rows, failed = 0;
    if (file_dtype(t, &have))
        return -1;
    if (K % DT_Q8_BLOCK)
        return err_set("tensor '%s': %s weights need widths that are multiples of %d, not %d",
                       t->name, dt_name(m->wtype), DT_Q8_BLOCK, K);
    if (finite(t, have, (size_t)rows * cols))
        return -1;
    size_t row = dt_bytes(qt, (size_t)K);
    uint8_t *q = err_alloc_big((size_t)V * row, "quantised weights");
    uint16_t *s =
        q && !own(m, q) ? err_alloc_big(dt_scale_bytes(qt, (size_t)V * K), "their scales") : NULL;
    if (!s || own(m, s))
        return err_wrap("quantising tensor '%s'", t->name);
    const char *src = t->data;
    size_t es = dt_size(have);
#pragma omp parallel
    {
        float *tile = malloc(sizeof(float) * DT_Q8_BLOCK * (size_t)K), run[DT_Q8_BLOCK];
#pragma omp for schedule(dynamic)
        for (int v0 = 0; v0 < V; v0 += DT_Q8_BLOCK) {
            int nv = V - v0 < DT_Q8_BLOCK ? V - v0 : DT_Q8_BLOCK;
            if (!tile)
                continue;
            for (int k = 0; by_column && k < K; k++) { /* row k's run of these columns, scattered */
                dt_to_f32(run, src + ((size_t)k * cols + v0) * es, have, (size_t)nv);
                for (int i = 0; i < nv; i++)
                    tile[(size_t)i * K + k] = run[i];
            }
            for (int i = 0; !by_column && i < nv; i++)
                dt_to_f32(tile + (size_t)i * K, src + (size_t)(v0 + i) * cols * es, have,
                          (size_t)K);
            for (int i = 0; i < nv; i++) {
                uint16_t *si = s + (size_t)(v0 + i) * (K / DT_Q8_BLOCK);
                if (qt == DT_Q4)
                    dt_q4_quantize(q + (size_t)(v0 + i) * row, si, tile + (size_t)i * K, (size_t)K);
                else if (qt == DT_Q6)
                    dt_q6_quantize(q + (size_t)(v0 + i) * row, si, tile + (size_t)i * K, (size_t)K);
                else
                    dt_q8_quantize((int8_t *)q + (size_t)(v0 + i) * row, si, NULL,
                                   tile + (size_t)i * K, (size_t)K);
            }
        }
        if (!tile) {
#pragma omp atomic write
            failed = 1;
        }
        free(tile);
    }
    if (failed)
        return err_set("out of memory quantising tensor '%s'", t->name);
    *out = (kb_mat){.data = q, .type = qt, .rows = rows, .cols = cols, .scales = s};
    return 0;
}

static const float *vec(gpt2_model *m, const char *name, int n)
{
    const st_tensor *t = find(m, name, 0, n);
    return t ? as_type(m, t, DT_F32) : NULL;
}

/* how a matrix is used, which decides its quantised layout */
enum { PRODUCT, TOKENS, POSITIONS };

/* the type a matrix of `role` is kept in for weights of type wtype: with q8 and q4 weights the
 * position embeddings (one row read per token) stay f32, and with q4 the tied token embedding and
 * LM head take six bits, as llama.cpp's q4_0 files keep their output in q6_K: it is the one
 * product every token's choice depends on whole, and a third of a decode step's bytes (q8 there
 * left the step 1.48 times q8's bytes at best) */
static dtype type_for(dtype wtype, int role)
{
    if ((wtype == DT_Q8 || wtype == DT_Q4) && role == POSITIONS)
        return DT_F32;
    return wtype == DT_Q4 && role == TOKENS ? DT_Q6 : wtype;
}

static int mat(gpt2_model *m, kb_mat *out, const char *name, int rows, int cols, int role)
{
    const st_tensor *t = find(m, name, rows, cols);
    if (!t)
        return -1;
    dtype want = type_for(m->wtype, role);
    if (want == DT_Q8 || want == DT_Q4 || want == DT_Q6)
        return quantize(m, out, t, rows, cols, role == PRODUCT, want);
    *out = (kb_mat){.data = as_type(m, t, want), .type = want, .rows = rows, .cols = cols};
    return out->data ? 0 : -1;
}

static int load_layer(gpt2_model *m, int l)
{
    int C = m->cfg.n_embd;
    gpt2_layer *L = &m->layers[l];
    char n[8][96];
    static const char *const parts[8] = {"ln_1.weight",      "ln_1.bias",      "attn.c_attn.bias",
                                         "attn.c_proj.bias", "ln_2.weight",    "ln_2.bias",
                                         "mlp.c_fc.bias",    "mlp.c_proj.bias"};
    static const int widths[8] = {1, 1, 3, 1, 1, 1, 4, 1};
    const float **dst[8] = {&L->ln1_g, &L->ln1_b, &L->attn_b, &L->proj_b,
                            &L->ln2_g, &L->ln2_b, &L->fc_b,   &L->fcproj_b};
    for (int i = 0; i < 8; i++) {
        snprintf(n[i], sizeof n[i], "h.%d.%s", l, parts[i]);
        if (!(*dst[i] = vec(m, n[i], widths[i] * C)))
            return -1;
    }
    char w[4][96];
    snprintf(w[0], sizeof w[0], "h.%d.attn.c_attn.weight", l);
    snprintf(w[1], sizeof w[1], "h.%d.attn.c_proj.weight", l);
    snprintf(w[2], sizeof w[2], "h.%d.mlp.c_fc.weight", l);
    snprintf(w[3], sizeof w[3], "h.%d.mlp.c_proj.weight", l);
    return mat(m, &L->attn_w, w[0], C, 3 * C, PRODUCT) || mat(m, &L->proj_w, w[1], C, C, PRODUCT) ||
           mat(m, &L->fc_w, w[2], C, 4 * C, PRODUCT) ||
           mat(m, &L->fcproj_w, w[3], 4 * C, C, PRODUCT);
}

static void report(const gpt2_progress *p, const char *stage, int done, int total)
{
    if (p && p->fn)
        p->fn(p->ctx, stage, (double)done / total);
}

int gpt2_load(gpt2_model *m, const char *dir, dtype wtype, const gpt2_progress *progress)
{
    char path[PATH_MAX];
    memset(m, 0, sizeof *m);
    m->wtype = wtype;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (cfg_load(&m->cfg, path))
        return -1;
    if (!(m->file = ckpt_file(dir)))
        return -1;
    snprintf(path, sizeof path, "%s/%s", dir, m->file);
    if (ckpt_open(&m->st, path))
        return -1;
    const gpt2_config *c = &m->cfg;
    const st_tensor *wte = find(m, "wte.weight", c->vocab_size, c->n_embd);
    if (!wte || file_dtype(wte, &m->file_type))
        goto fail;
    m->layers = err_calloc((size_t)c->n_layer, sizeof *m->layers, "layer table");
    if (!m->layers || mat(m, &m->wte, "wte.weight", c->vocab_size, c->n_embd, TOKENS) ||
        mat(m, &m->wpe, "wpe.weight", c->n_ctx, c->n_embd, POSITIONS) ||
        !(m->lnf_g = vec(m, "ln_f.weight", c->n_embd)) ||
        !(m->lnf_b = vec(m, "ln_f.bias", c->n_embd)))
        goto fail;
    char stage[64];
    snprintf(stage, sizeof stage,
             m->file_type == wtype              ? "reading weights"
             : wtype == DT_Q8 || wtype == DT_Q4 ? "quantising weights to %s"
                                                : "converting weights to %s",
             dt_name(wtype));
    for (int l = 0; l < c->n_layer; l++) {
        if (load_layer(m, l))
            goto fail;
        report(progress, stage, l + 1, c->n_layer);
    }
    return 0;
fail:
    err_wrap("%s", path);
    gpt2_free(m);
    return -1;
}

static const void *place(gpt2_model *m, const void *host, size_t bytes)
{
    void *d = m->placed->alloc(m->placed, bytes, "model weights");
    if (!d)
        return NULL;
    m->placed_bufs[m->n_placed++] = d;
    if (m->placed->copy(m->placed, d, host, bytes))
        return NULL;
    return d;
}

static int place_mat(gpt2_model *m, kb_mat *w)
{
    size_t n = (size_t)w->rows * w->cols;
    if (!(w->data = place(m, w->data, dt_bytes(w->type, n))))
        return 0;
    return !dt_scale_bytes(w->type, n) ||
           (w->scales = place(m, w->scales, dt_scale_bytes(w->type, n))) != NULL;
}

/* frees p if the model owns it (converted at load); 0 where it does not */
static int drop_owned(gpt2_model *m, const void *p)
{
    size_t i = 0;
    while (i < m->n_owned && m->owned[i] != p)
        i++;
    if (i == m->n_owned)
        return 0;
    free(m->owned[i]);
    m->owned[i] = m->owned[--m->n_owned];
    return 1;
}

/* w in the backend's own layout, where it has one for w; the converted copy it replaces is freed,
 * or the mapped file's pages it was read from handed back */
static int pack_mat(gpt2_model *m, kb_mat *w)
{
    kb_mat p = {0};
    if (m->placed->pack(m->placed, &p, w))
        return 0;
    if (!p.data)
        return 1;
    m->placed_bufs[m->n_placed++] = (void *)p.data;
    if (p.scales != w->scales) /* the packed copy holds its own (q4 scales in groups) */
        drop_owned(m, w->scales);
    if (!drop_owned(m, w->data)) {
        /* read in place from the file's mapping: its pages go back (a read-only private mapping
         * gives them again from the file should another tensor share them) */
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)w->data,
                  b = a + (size_t)w->rows * w->cols * dt_size(w->type), map = (uintptr_t)m->st.map;
        int mapped = map && a >= map && b <= map + m->st.map_len;
        a = (a + page - 1) / page * page, b = b / page * page;
        if (mapped && b > a)
            madvise((void *)a, b - a, MADV_DONTNEED);
    }
    *w = p;
    return 1;
}

/* the products' weights in the host backend's own layout (kernels/cpu: column blocks), and a
 * 6-bit LM head's rows (in groups) */
static int pack_products(gpt2_model *m)
{
    int ok = m->wte.type != DT_Q6 || pack_mat(m, &m->wte);
    for (int l = 0; ok && l < m->cfg.n_layer; l++) {
        gpt2_layer *L = &m->layers[l];
        ok = pack_mat(m, &L->attn_w) && pack_mat(m, &L->proj_w) && pack_mat(m, &L->fc_w) &&
             pack_mat(m, &L->fcproj_w);
    }
    return ok ? 0 : err_wrap("packing the weights for %s", m->placed->name);
}

int gpt2_place(gpt2_model *m, kb_backend *b, const gpt2_progress *progress)
{
    if (!b->device_memory && !b->pack)
        return 0;
    const gpt2_config *c = &m->cfg;
    size_t C = (size_t)c->n_embd;
    m->placed = b;
    m->placed_bufs = err_calloc((size_t)(4 + 12 * c->n_layer) * 2, sizeof(void *), "weight table");
    if (!m->placed_bufs)
        return -1;
    if (!b->device_memory)
        return pack_products(m);
#define MAT(mt) place_mat(m, &(mt))
#define VEC(v, n) ((v) = place(m, (v), (n) * sizeof(float))) != NULL
    int ok = MAT(m->wte) && MAT(m->wpe) && VEC(m->lnf_g, C) && VEC(m->lnf_b, C);
    for (int l = 0; ok && l < c->n_layer; l++) {
        gpt2_layer *L = &m->layers[l];
        ok = MAT(L->attn_w) && MAT(L->proj_w) && MAT(L->fc_w) && MAT(L->fcproj_w) &&
             VEC(L->ln1_g, C) && VEC(L->ln1_b, C) && VEC(L->attn_b, 3 * C) && VEC(L->proj_b, C) &&
             VEC(L->ln2_g, C) && VEC(L->ln2_b, C) && VEC(L->fc_b, 4 * C) && VEC(L->fcproj_b, C);
        report(progress, "copying weights to the GPU", l + 1, c->n_layer);
    }
#undef MAT
#undef VEC
    return ok ? 0 : err_wrap("copying the weights to %s", b->name);
}

void gpt2_free(gpt2_model *m)
{
    for (int i = 0; i < m->n_placed; i++)
        m->placed->release(m->placed, m->placed_bufs[i]);
    free(m->placed_bufs);
    if (m->work_backend) {
        m->work_backend->release(m->work_backend, m->x);
        m->work_backend->release(m->work_backend, m->logits);
        m->x = NULL;
    }
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->x);
    st_close(&m->st);
    memset(m, 0, sizeof *m);
}

int64_t gpt2_param_count(const gpt2_config *c)
{
    int64_t C = c->n_embd;
    int64_t per_layer =
        4 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C);
    return (int64_t)c->vocab_size * C + (int64_t)c->n_ctx * C + 2 * C + c->n_layer * per_layer;
}

/* bytes of n values of type t with their scales */
static uint64_t stored(dtype t, uint64_t n) { return dt_bytes(t, n) + dt_scale_bytes(t, n); }

uint64_t gpt2_bytes_per_token(const gpt2_model *m)
{
    uint64_t C = m->cfg.n_embd, n = m->cfg.n_layer * 12 * C * C,
             v = (uint64_t)m->cfg.vocab_size * C;
    return stored(m->wtype, n) + stored(type_for(m->wtype, TOKENS), v);
}

uint64_t gpt2_weights_bytes(const gpt2_model *m)
{
    const gpt2_config *c = &m->cfg;
    uint64_t C = c->n_embd, vectors = c->n_layer * 13 * C + 2 * C;
    return gpt2_bytes_per_token(m) + stored(type_for(m->wtype, POSITIONS), (uint64_t)c->n_ctx * C) +
           4 * vectors;
}
