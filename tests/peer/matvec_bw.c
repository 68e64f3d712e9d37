/* What one core does per byte in decode: the CPU backend's one-token product (backend.h's matmul)
 * timed against a plain read of the same bytes, three times: over the 124M shape's 48 transformer
 * matrices (85M weights, far past the caches: the memory's pace), over its LM head (matmul_t of
 * the 50257 x 768 token embedding, a third of a decode step's bytes; 6-bit in the q4 row, as
 * the model keeps it) and over one of its 768 x 768
 * matrices, read again and again from the caches (the core's own pace: a product slower than the
 * read there is bound by its instructions, not by the memory; a smaller matrix would time the
 * product's fixed costs instead). Best of 5 passes, GB/s of weights; memory as the model's
 * (err_alloc_big).
 * Usage: matvec_bw [THREADS] (default 1) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/backend.h"
#include "../../kernels/err.h"

typedef struct {
    kb_mat m;
    size_t bytes, scale_bytes; /* all the product reads; of them, the block types' scales */
} mat;

/* a random matrix in the layout the backend multiplies (kb_backend.pack where `pack`), as a
 * model's is */
static int make(kb_backend *b, mat *out, dtype t, int rows, int cols, unsigned *seed, int pack)
{
    size_t n = (size_t)rows * cols;
    float *f = malloc(n * sizeof *f);
    /* as the loader's converted weights are (a file's may be less aligned) */
    void *d = err_alloc_big(dt_bytes(t, n) + 64, "a matrix");
    size_t nsc = dt_scale_bytes(t, n);
    uint16_t *sc = nsc ? err_alloc_big(nsc, "scales") : NULL;
    if (!f || !d || (nsc && !sc)) {
        free(f), free(d), free(sc);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        f[i] = (float)rand_r(seed) / RAND_MAX - 0.5f;
    if (t == DT_Q8)
        dt_q8_quantize(d, sc, NULL, f, n);
    else if (t == DT_Q4)
        dt_q4_quantize(d, sc, f, n);
    else if (t == DT_Q6)
        dt_q6_quantize(d, sc, f, n);
    else
        dt_from_f32(d, f, t, n);
    free(f);
    *out = (mat){{d, t, rows, cols, sc, 0}, dt_bytes(t, n) + nsc, nsc};
    kb_mat packed;
    if (!pack)
        return 0;
    if (b->pack && b->pack(b, &packed, &out->m))
        return -1;
    if (b->pack && packed.data) {
        free(d);
        if (packed.scales != sc) /* q4's scales packed with the data, in one allocation */
            free(sc);
        out->m = packed;
    }
    return 0;
}

static void drop(mat *m)
{
    free((void *)m->m.data);
    if (!m->m.column_blocks) /* a packed matrix's scales (q4's) share its data's allocation */
        free((void *)m->m.scales);
}

/* the read: integers summed, vectorised (a float sum is a dependent chain, slower than memory) */
static uint64_t read_all(const mat *m, int threads)
{
    uint64_t s = 0;
    for (int part = 0; part < 2; part++) {
        const uint64_t *p = part ? (const void *)m->m.scales : m->m.data;
        size_t n = (part ? m->scale_bytes : m->bytes - m->scale_bytes) / sizeof *p;
#pragma omp parallel for simd num_threads(threads) reduction(+ : s) schedule(static)
        for (size_t j = 0; j < n; j++)
            s += p[j];
    }
    return s;
}

/* GB/s, the best of 5 passes of `reps` rounds over the matrices: the product (matmul_t's where
 * `t`), or (y NULL) a read */
static double pace(kb_backend *b, const mat *ms, int nm, int reps, float *y, const float *x, int t)
{
    size_t bytes = 0;
    double best = 1e30, sink = 0;
    for (int i = 0; i < nm; i++)
        bytes += ms[i].bytes;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = omp_get_wtime();
        for (int r = 0; r < reps; r++)
            for (int i = 0; i < nm; i++) {
                if (y && (t ? b->matmul_t(b, y, x, 1, &ms[i].m)
                            : b->matmul(b, y, x, 1, &ms[i].m, NULL, KB_LINEAR)))
                    return -1;
                sink += y ? y[0] : (double)read_all(&ms[i], b->threads);
            }
        double dt = omp_get_wtime() - t0;
        best = dt < best ? dt : best;
    }
    return (double)bytes * reps / best / 1e9 + 0 * sink;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    kb_backend *b = threads > 0 ? kb_create("cpu", threads) : NULL;
    static const int shape[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    static const dtype types[] = {DT_F32, DT_BF16, DT_F16, DT_Q8, DT_Q4};
    enum { VOCAB = 50257 };
    float *x = malloc(3072 * sizeof *x), *y = malloc(VOCAB * sizeof *y);
    unsigned seed = 1;
    if (!b || !x || !y) {
        fprintf(stderr, "matvec_bw: %s\n", b ? "out of memory" : "usage: matvec_bw [THREADS]");
        return 1;
    }
    for (int i = 0; i < 3072; i++)
        x[i] = (float)rand_r(&seed) / RAND_MAX - 0.5f;
    printf("%d thread(s), GB/s of weights: product / plain read of the same bytes\n", threads);
    printf("%-7s %-26s %-26s %s\n", "weights", "124M's 48 matrices (DRAM)", "its LM head (DRAM)",
           "one 768 x 768 (in cache)");
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        mat big[48], head, small;
        for (int i = 0; i < 48; i++)
            if (make(b, &big[i], types[t], shape[i % 4][0], shape[i % 4][1], &seed, 1))
                return fprintf(stderr, "matvec_bw: out of memory\n"), 1;
        if (make(b, &small, types[t], 768, 768, &seed, 1) ||
            make(b, &head, types[t] == DT_Q4 ? DT_Q6 : types[t], VOCAB, 768, &seed,
                 types[t] == DT_Q4)) /* packed as the model packs a 6-bit head (rows in groups) */
            return fprintf(stderr, "matvec_bw: out of memory\n"), 1;
        double p[3] = {pace(b, big, 48, 2, y, x, 0), pace(b, &head, 1, 2, y, x, 1),
                       pace(b, &small, 1, 400, y, x, 0)},
               r[3] = {pace(b, big, 48, 2, NULL, x, 0), pace(b, &head, 1, 2, NULL, x, 1),
                       pace(b, &small, 1, 400, NULL, x, 0)};
        char col[3][64];
        for (int i = 0; i < 3; i++)
            snprintf(col[i], sizeof col[i], "%.1f / %.1f (%.0f%%)", p[i], r[i], 100 * p[i] / r[i]);
        printf("%-7s %-26s %-26s %s\n", dt_name(types[t]), col[0], col[1], col[2]);
        for (int i = 0; i < 48; i++)
            drop(&big[i]);
        drop(&small);
        drop(&head);
    }
    b->destroy(b);
    free(x), free(y);
    return 0;
}
