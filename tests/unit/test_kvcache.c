/* The cache manager under random operations: after every step the cached path's logits are compared
 * with a fresh computation of the same token sequence from scratch (f32 cache, no reuse). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/err.h"
#include "../../model/gpt2.h"
#include "check.h"
#include "model_fixture.h"

enum { WINDOW = 48, MAX_SEQS = 4 };

typedef struct {
    kv_seq *s;
    int ids[WINDOW], n;
} tracked;

static uint64_t rng = 99;
static int rnd(int n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng >> 33) % (uint64_t)n);
}

typedef struct {
    gpt2_model m;
    kb_backend *b;
    kv_pool *ref;
    kv_seq *fresh;
    float *got, *want;
} rig;

/* decodes one more token on t and compares with a from-scratch pass; returns the relative error */
static double step_and_compare(rig *r, tracked *t)
{
    int id = rnd(r->m.cfg.vocab_size);
    t->ids[t->n++] = id;
    if (gpt2_forward(&r->m, r->b, t->s, &id, 1, r->got)) {
        CHECK(0, "cached forward failed: %s", err_msg());
        return 1;
    }
    kv_truncate(r->fresh, 0);
    if (gpt2_forward(&r->m, r->b, r->fresh, t->ids, t->n, r->want)) {
        CHECK(0, "fresh forward failed: %s", err_msg());
        return 1;
    }
    CHECK(kv_len(t->s) == t->n, "cache length %d, sequence %d", kv_len(t->s), t->n);
    return rel_err(r->got, r->want, r->m.cfg.vocab_size);
}

static double run_config(rig *r, kv_layout layout, int prealloc, dtype type, int steps,
                         int *offloads)
{
    kv_opts o;
    kv_opts_default(&o, &r->m.cfg);
    o.layout = layout;
    o.prealloc = prealloc;
    o.type = type;
    o.block_tokens = 4;
    o.grow_factor = 1.5f;
    o.window = WINDOW;
    /* room for about two and a half full windows: four sequences must take turns in it */
    int H = r->m.cfg.n_head;
    size_t tok = 2 * (size_t)r->m.cfg.n_layer * H * kvl_row_bytes(type, r->m.cfg.n_embd / H);
    o.pool_bytes = tok * WINDOW * 5 / 2 + 4096;
    kv_pool *pool = kv_pool_create(r->b, &r->m.cfg, &o, NULL);
    CHECK(pool != NULL, "pool: %s", err_msg());
    if (!pool)
        return 1;
    tracked seqs[MAX_SEQS] = {{0}};
    int n_seqs = 1, cur = 0;
    seqs[0].s = kv_seq_new(pool, 1);
    double worst = step_and_compare(r, &seqs[0]);
    for (int step = 0; step < steps; step++) {
        tracked *t = &seqs[cur];
        int op = rnd(8), rc = 0;
        if (op == 0) { /* append a chunk (prefill) */
            int k = 1 + rnd(12);
            if (t->n + k + 1 > WINDOW)
                k = WINDOW - 1 - t->n;
            if (k > 0) {
                for (int i = 0; i < k; i++)
                    t->ids[t->n + i] = rnd(r->m.cfg.vocab_size);
                rc = gpt2_forward(&r->m, r->b, t->s, t->ids + t->n, k, NULL);
                t->n += rc ? 0 : k;
            }
        } else if (op == 1 && t->n > 1) { /* roll back */
            int to = 1 + rnd(t->n - 1);
            rc = kv_truncate(t->s, to);
            t->n = to;
        } else if (op == 2 && n_seqs < MAX_SEQS) { /* fork, and carry on with either side */
            tracked *c = &seqs[n_seqs];
            c->s = kv_fork(t->s, n_seqs + 1);
            rc = c->s ? 0 : -1;
            if (!rc) {
                memcpy(c->ids, t->ids, sizeof t->ids);
                c->n = t->n;
                cur = rnd(2) ? n_seqs : cur;
                n_seqs++;
            }
        } else if (op == 3) { /* move to host; the next forward brings it back */
            rc = kv_offload(t->s);
            (*offloads)++;
        } else if (op == 4 && t->n > 3) { /* exact eviction: drop [a, b), re-prefill the rest */
            int a = 1 + rnd(t->n - 2), b = a + 1 + rnd(t->n - a - 1);
            memmove(t->ids + a, t->ids + b, sizeof(int) * (size_t)(t->n - b));
            t->n -= b - a;
            rc = kv_truncate(t->s, a);
            if (!rc && t->n > a)
                rc = gpt2_forward(&r->m, r->b, t->s, t->ids + a, t->n - a, NULL);
        } else if (op == 5 && n_seqs > 1) {
            cur = rnd(n_seqs);
        }
        CHECK(!rc, "step %d op %d failed: %s", step, op, err_msg());
        if (rc)
            break;
        t = &seqs[cur];
        if (t->n + 1 >= WINDOW) { /* keep room for the check token */
            kv_truncate(t->s, WINDOW / 2);
            t->n = WINDOW / 2;
        }
        double e = step_and_compare(r, t);
        worst = e > worst ? e : worst;
    }
    kv_pool_stats ps;
    kv_pool_get_stats(pool, &ps);
    *offloads += ps.offloaded;
    kv_pool_free(pool);
    return worst;
}

/* bounds per cache dtype: f32 is exact up to rounding; the others are what storing keys and values
 * in fewer bits costs on the model (README reports the measured figures) */
static void random_operations_on(const char *dir, const dtype *types, const double *bound, int n)
{
    rig r = {0};
    CHECK(gpt2_load(&r.m, dir, DT_F32, NULL) == 0, "load: %s", err_msg());
    r.b = kb_create("cpu", 2);
    kv_opts o;
    kv_opts_default(&o, &r.m.cfg);
    o.layout = KV_CONTIGUOUS;
    o.prealloc = 1;
    r.ref = kv_pool_create(r.b, &r.m.cfg, &o, NULL);
    r.fresh = kv_seq_new(r.ref, 0);
    r.got = malloc(sizeof(float) * r.m.cfg.vocab_size);
    r.want = malloc(sizeof(float) * r.m.cfg.vocab_size);
    const char *names[3] = {"paged", "contiguous", "contiguous-prealloc"};
    for (int t = 0; t < n; t++)
        for (int l = 0; l < 3; l++) {
            int offloads = 0;
            double worst =
                run_config(&r, l == 0 ? KV_PAGED : KV_CONTIGUOUS, l == 2, types[t], 80, &offloads);
            CHECK(worst < bound[t], "%s %s: worst relative error %.3g (bound %.0e)", names[l],
                  dt_name(types[t]), worst, bound[t]);
            printf("     kvcache %-20s %-5s worst rel err %.2e, %d offloads\n", names[l],
                   dt_name(types[t]), worst, offloads);
        }
    free(r.got);
    free(r.want);
    kv_pool_free(r.ref);
    gpt2_free(&r.m); /* before its backend: the activations are the backend's */
    r.b->destroy(r.b);
}

static void random_operations(void)
{
    dtype types[4] = {DT_F32, DT_F16, DT_BF16, DT_I8};
    double bound[4] = {1e-5, 2e-3, 2e-2, 5e-2};
    random_operations_on(fixture_model("f32", 64), types, bound, 4);
}

/* every row of the first n positions, copied out through the layout */
static char *snapshot(kv_seq *s, int n, size_t *bytes)
{
    const kb_kv *v = kv_view(s);
    size_t row = dt_bytes(v->type, (size_t)v->head_dim), sc = kvl_scale_bytes(v->type, v->head_dim);
    *bytes = (size_t)n * v->n_layer * 2 * v->n_head * (row + sc);
    char *out = malloc(*bytes), *p = out;
    for (int pos = 0; pos < n; pos++)
        for (int l = 0; l < v->n_layer; l++)
            for (int kv = 0; kv < 2; kv++)
                for (int h = 0; h < v->n_head; h++) {
                    memcpy(p, kvl_row(v, l, kv, h, pos), row);
                    memcpy(p + row, kvl_scales(v, l, kv, h, pos), sc);
                    p += row + sc;
                }
    return out;
}

static void pool_exhaustion_on(const char *dir, const dtype *types, int n)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, dir, DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2);
    for (int layout = 0; layout < 2; layout++)
        for (int ti = 0; ti < n; ti++) {
            kv_opts o;
            kv_opts_default(&o, &m.cfg);
            o.layout = layout ? KV_CONTIGUOUS : KV_PAGED;
            o.type = types[ti];
            o.window = 64;
            /* 64 positions: one sequence of 40 fits, two do not */
            o.pool_bytes = 4 * kvl_block_bytes(o.type, m.cfg.n_layer, m.cfg.n_head,
                                               m.cfg.n_embd / m.cfg.n_head, 16);
            kv_pool *pool = kv_pool_create(b, &m.cfg, &o, NULL);
            kv_seq *a = kv_seq_new(pool, 1), *c = kv_seq_new(pool, 2);
            int ids[40];
            for (int i = 0; i < 40; i++)
                ids[i] = 1000 + i * 13;
            CHECK(gpt2_forward(&m, b, a, ids, 40, NULL) == 0, "fill a: %s", err_msg());
            size_t n1, n2;
            char *before = snapshot(a, 40, &n1);
            /* c needs more than what is left: a (idle, least recently used) moves to host memory */
            CHECK(gpt2_forward(&m, b, c, ids, 40, NULL) == 0, "fill c: %s", err_msg());
            CHECK(kv_is_offloaded(a), "a was not offloaded");
            /* using a again brings it back, which pushes c out */
            CHECK(kv_restore(a) == 0, "restore: %s", err_msg());
            CHECK(!kv_is_offloaded(a) && kv_is_offloaded(c), "restore did not swap a and c");
            char *after = snapshot(a, 40, &n2);
            CHECK(n1 == n2 && !memcmp(before, after, n1),
                  "offload/restore changed the cached bytes");
            free(before);
            free(after);
            /* one sequence bigger than the whole pool: a clear error, nothing dropped */
            kv_set_busy(c, 1);
            int rc = kv_reserve(a, 60);
            CHECK(rc == -1 && (strstr(err_msg(), "KV pool") || strstr(err_msg(), "window")),
                  "oversized reserve: %s", err_msg());
            CHECK(kv_len(a) == 40, "a lost tokens");
            /* work in the background takes only what the pool can spare: a fork of c's first 8
             * positions that then needs 30 more fails, and nothing is moved out for it */
            kv_set_busy(c, 0);
            kv_restore(c);
            kv_seq *bg = kv_fork_background(c, 8);
            int a_out = kv_is_offloaded(a), c_out = kv_is_offloaded(c);
            rc = bg ? kv_reserve(bg, 30) : -1;
            CHECK(bg && rc == -1 && strstr(err_msg(), "spare"),
                  "a background fork took memory it could not spare: %s", err_msg());
            CHECK(kv_is_offloaded(a) == a_out && kv_is_offloaded(c) == c_out,
                  "something moved out for background work");
            kv_seq_free(bg);
            kv_pool_free(pool);
        }
    gpt2_free(&m);
    b->destroy(b);
}

static void pool_exhaustion(void)
{
    dtype types[2] = {DT_F32, DT_I8};
    pool_exhaustion_on(fixture_model("f32", 64), types, 2);
}

typedef struct {
    int n, conv[8], shared[8];
} shares;

static void on_share(void *ctx, json_t *ev)
{
    shares *s = ctx;
    if (ev_kind_of(ev) == EVK_SHARE && s->n < 8) {
        s->conv[s->n] = ev_conv(ev);
        s->shared[s->n++] = ev_cache_shared_blocks(ev_share_cache(ev));
    }
}

/* A parent's shared blocks as its fork goes its own way: 40 positions in blocks of 16 are 3 blocks,
 * all shared after a fork; the fork's write into the part-filled third copies it (2 shared), its
 * truncation to 10 lets go of the second (1), its end of the first (0). Each change reaches the
 * parent as a share event. A plan made in the background shares blocks too, and is no fork. */
static void shares_after_fork(void)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, fixture_model("f32", 64), DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2);
    ev_bus *bus = ev_bus_create();
    shares got = {0};
    ev_subscribe(bus, on_share, &got);
    kv_opts o;
    kv_opts_default(&o, &m.cfg);
    o.block_tokens = 16;
    kv_pool *pool = kv_pool_create(b, &m.cfg, &o, bus);
    kv_seq *parent = kv_seq_new(pool, 1);
    int ids[40];
    for (int i = 0; i < 40; i++)
        ids[i] = 300 + i * 11;
    CHECK(pool && parent && gpt2_forward(&m, b, parent, ids, 40, NULL) == 0, "prefill: %s",
          err_msg());
    kv_seq *child = kv_fork(parent, 2);
    kv_seq_stats st;
    kv_seq_get_stats(parent, &st);
    CHECK(child && st.shared_blocks == 3 && got.n == 0,
          "after the fork: parent shares %d, %d events", st.shared_blocks, got.n);
    CHECK(kv_reserve(child, 1) == 0, "reserve: %s", err_msg());
    kv_advance(child, 1);
    CHECK(kv_truncate(child, 10) == 0, "truncate: %s", err_msg());
    kv_seq *plan = kv_fork_background(parent, 40);
    kv_seq_get_stats(parent, &st);
    CHECK(plan && st.shared_blocks == 1, "with a plan in the background: parent shares %d",
          st.shared_blocks);
    kv_seq_free(plan);
    kv_seq_free(child);
    static const int want[] = {2, 1, 0};
    int ok = got.n == 3;
    for (int i = 0; ok && i < 3; i++)
        ok = got.conv[i] == 1 && got.shared[i] == want[i];
    CHECK(ok, "share events: %d (want 3: conv 1 sharing 2, 1, 0), first conv %d sharing %d", got.n,
          got.n ? got.conv[0] : 0, got.n ? got.shared[0] : 0);
    kv_pool_free(pool);
    ev_bus_free(bus);
    gpt2_free(&m);
    b->destroy(b);
}

/* kv_growth_bytes against what growing takes: a sequence of 10 positions grown to the window of 64
 * one position at a time (as decode does) raises the pool's peak by what it says (paged: by no
 * more, and it says at least the new positions' bytes). */
static void growth_bytes(void)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, fixture_model("f32", 64), DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2);
    for (int layout = 0; layout < 3; layout++) {
        kv_opts o;
        kv_opts_default(&o, &m.cfg);
        o.layout = layout ? KV_CONTIGUOUS : KV_PAGED;
        o.prealloc = layout == 2;
        o.window = 64;
        kv_pool *pool = kv_pool_create(b, &m.cfg, &o, NULL);
        kv_seq *s = kv_seq_new(pool, 1);
        int ids[64];
        for (int i = 0; i < 64; i++)
            ids[i] = 500 + i * 7;
        CHECK(pool && s && gpt2_forward(&m, b, s, ids, 10, NULL) == 0, "layout %d: %s", layout,
              err_msg());
        kv_pool_stats before, after;
        kv_pool_get_stats(pool, &before);
        size_t said = kv_growth_bytes(s, 64), per = kv_bytes_per_token(pool);
        for (int n = 10; n < 64; n++)
            CHECK(gpt2_forward(&m, b, s, ids + n, 1, NULL) == 0, "layout %d: position %d: %s",
                  layout, n, err_msg());
        kv_pool_get_stats(pool, &after);
        size_t took = after.peak_bytes - before.used_bytes;
        /* a contiguous growth's need is exact (the pool counts its peak during the copy) */
        CHECK(layout ? took == said : took <= said && said >= 54 * per,
              "layout %d: growing took %zu bytes, kv_growth_bytes said %zu", layout, took, said);
        if (layout == 2)
            CHECK(said == 0, "reserved at once, yet %zu bytes said", said);
        kv_seq_free(s);
        kv_pool_free(pool);
    }
    gpt2_free(&m);
    b->destroy(b);
}

/* A snapshot's rows go back in only if they hold numbers: one NaN, or one infinity, in any cache
 * dtype (an int8 cache: in a row's scale) is refused, naming the position; the rows as exported go
 * in. */
static void import_refuses_non_finite_on(const char *dir, const dtype *types, int nt)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, dir, DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 2);
    for (int t = 0; t < nt; t++) {
        kv_opts o;
        kv_opts_default(&o, &m.cfg);
        o.type = types[t];
        o.window = 64;
        kv_pool *pool = kv_pool_create(b, &m.cfg, &o, NULL);
        kv_seq *a = kv_seq_new(pool, 1), *c = kv_seq_new(pool, 2), *d = kv_seq_new(pool, 3);
        int ids[12];
        for (int i = 0; i < 12; i++)
            ids[i] = 500 + i * 7;
        CHECK(gpt2_forward(&m, b, a, ids, 12, NULL) == 0, "fill: %s", err_msg());
        size_t n = kv_export_bytes(a), rows = (size_t)m.cfg.n_layer * 2 * m.cfg.n_head * 12;
        unsigned char *flat = malloc(n);
        CHECK(flat && kv_export(a, flat) == 0, "export: %s", err_msg());
        const char *name = dt_name(types[t]);
        CHECK(kv_import(c, flat, 12) == 0 && kv_len(c) == 12, "%s: the exported rows: %s", name,
              err_msg());
        /* position 5 of the first row: its value, or for int8 and q4 its (first) scale after all
         * the values */
        size_t hd = (size_t)(m.cfg.n_embd / m.cfg.n_head);
        size_t at = types[t] == DT_I8   ? rows * hd + 4 * 5
                    : types[t] == DT_Q4 ? rows * hd / 2 + 5 * kvl_scale_bytes(DT_Q4, (int)hd)
                                        : 5 * hd * dt_size(types[t]);
        static const unsigned char nan32[4] = {0, 0, 0xc0, 0x7f}, inf16[2] = {0, 0x7c},
                                   nan_bf16[2] = {0xc0, 0x7f};
        int half = types[t] == DT_F16 || types[t] == DT_BF16 || types[t] == DT_Q4;
        memcpy(flat + at,
               types[t] == DT_F16 || types[t] == DT_Q4 ? inf16
               : types[t] == DT_BF16                   ? nan_bf16
                                                       : nan32,
               half ? 2 : 4);
        err_set("%s", "");
        int rc = kv_import(d, flat, 12);
        CHECK(rc < 0 && strstr(err_msg(), "position 5 holds a NaN or an infinity") &&
                  kv_len(d) == 0,
              "%s: a NaN went in: '%s'", name, err_msg());
        free(flat);
        kv_pool_free(pool);
    }
    gpt2_free(&m);
    b->destroy(b);
}

static void import_refuses_non_finite(void)
{
    dtype types[4] = {DT_F32, DT_F16, DT_BF16, DT_I8};
    import_refuses_non_finite_on(fixture_model("f32", 64), types, 4);
}

/* A q4 cache through the same paths, on heads of 32 (two of 64 wide; the fixture's heads of 8 do
 * not fill a block): against fresh recomputation in every layout, offload and restore byte for
 * byte, and a NaN scale refused at import. A model with heads of 8 refuses a q4 cache. */
static void q4_rows(void)
{
    const char *dir = fixture_shaped(2, 2, 64, 64, 3, 0, "f32");
    dtype q4 = DT_Q4;
    double bound = 0.3; /* what four bits cost here: 0.16-0.19 measured */
    random_operations_on(dir, &q4, &bound, 1);
    pool_exhaustion_on(dir, &q4, 1);
    import_refuses_non_finite_on(dir, &q4, 1);
    gpt2_model m;
    CHECK(gpt2_load(&m, fixture_model("f32", 64), DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *b = kb_create("cpu", 1);
    kv_opts o;
    kv_opts_default(&o, &m.cfg);
    o.type = DT_Q4;
    err_set("%s", "");
    kv_pool *p = kv_pool_create(b, &m.cfg, &o, NULL);
    CHECK(!p && strstr(err_msg(), "--cache-dtype q4: a head's 8 values do not fill blocks of 32"),
          "a q4 cache on heads of 8: '%s'", err_msg());
    kv_pool_free(p);
    gpt2_free(&m);
    b->destroy(b);
}

/* a "device" whose memory is the helpers' (so injected failures reach it): host memory reached only
 * through the backend's copies, as a GPU's is */
static void *helper_alloc(kb_backend *b, size_t bytes, const char *what)
{
    (void)b;
    return err_malloc(bytes, what);
}

static void helper_release(kb_backend *b, void *p)
{
    (void)b;
    free(p);
}

/* One scenario of the cache manager: a pool, ten sequences (the list grows), a prefill, a fork, an
 * offload and a restore; each step may fail, cleanly. */
static void alloc_scenario(gpt2_model *m, kb_backend *b, kv_layout layout, size_t pool_bytes)
{
    kv_opts o;
    kv_opts_default(&o, &m->cfg);
    o.layout = layout;
    o.window = 64;
    o.pool_bytes = pool_bytes;
    kv_pool *pool = kv_pool_create(b, &m->cfg, &o, NULL);
    if (!pool) {
        CHECK(strcmp(err_msg(), "unknown error"), "a pool that failed says nothing");
        return;
    }
    kv_seq *s[10] = {0};
    for (int i = 0; i < 10; i++)
        s[i] = kv_seq_new(pool, i + 1);
    int ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = 500 + 7 * i;
    if (s[0] && gpt2_forward(m, b, s[0], ids, 20, NULL) == 0) {
        kv_seq *f = kv_fork(s[0], 11);
        if (f && kv_offload(f) == 0)
            kv_restore(f);
        CHECK(kv_len(s[0]) == 20, "the parent lost tokens to its fork's offload: %d", kv_len(s[0]));
    }
    kv_pool_free(pool);
}

/* Every allocation of the scenario made to fail in turn, with host and with "device" memory, and a
 * pool smaller than a block: each is an error or a refused step, never a crash, and the sanitizer
 * build's LeakSanitizer finds nothing left behind. */
static void allocation_failures(void)
{
    gpt2_model m;
    CHECK(gpt2_load(&m, fixture_model("f32", 64), DT_F32, NULL) == 0, "load: %s", err_msg());
    kb_backend *cpu = kb_create("cpu", 1), dev = *cpu;
    dev.device_memory = 1;
    dev.alloc = helper_alloc;
    dev.release = helper_release;
    kb_backend *backs[2] = {cpu, &dev};
    size_t block =
        kvl_block_bytes(DT_F32, m.cfg.n_layer, m.cfg.n_head, m.cfg.n_embd / m.cfg.n_head, 16);
    for (int bi = 0; bi < 2; bi++)
        for (int layout = 0; layout < 2; layout++) {
            long n = 0, left = -1;
            do {
                err_set("%s", "");
                err_fail_allocs_after(n++);
                alloc_scenario(&m, backs[bi], layout ? KV_CONTIGUOUS : KV_PAGED, 6 * block);
                left = err_fail_allocs_after(-1);
            } while (left < 0 && n < 10000);
            CHECK(left >= 0, "the scenario still failed after %ld allocations", n);
            err_set("%s", "");
            alloc_scenario(&m, backs[bi], layout ? KV_CONTIGUOUS : KV_PAGED, block / 2);
            CHECK(strstr(err_msg(), "smaller than one block") || layout, "a pool under a block: %s",
                  err_msg());
        }
    gpt2_free(&m);
    cpu->destroy(cpu);
}

TEST_TABLE(kvcache_tests, {"kvcache/allocation_failures_clean", allocation_failures},
           {"kvcache/growth_bytes", growth_bytes},
           {"kvcache/shares_after_fork_told", shares_after_fork},
           {"kvcache/random_operations_vs_fresh", random_operations},
           {"kvcache/pool_exhaustion_offload_restore", pool_exhaustion},
           {"kvcache/import_refuses_non_finite", import_refuses_non_finite},
           {"kvcache/q4_rows", q4_rows});
