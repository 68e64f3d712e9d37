/* The CPU backend: each kernel here is also the reference that kernels/cuda/ is tested against. */
#ifndef KVCHAT_CPU_H
#define KVCHAT_CPU_H

#include "../backend.h"

/* threads <= 0: every core this process may run on, adapted per decode step (kernels/cpu/threads.c)
 */
kb_backend *cpu_backend_create(int threads);

/* Call first in main: under a memory limit, starts the process again without OpenBLAS's own thread
 * pool (kernels/cpu/blas.c says why). */
void cpu_blas_process(char **argv);
/* Has each of `threads` threads take its OpenBLAS buffer now; -1 (with error) when the address space
 * cannot hold them. */
int cpu_blas_reserve(int threads);

/* the thread count of each step: two candidates (the most, and one fewer), the faster by the
 * moving average of decode step times when adaptive */
typedef struct {
    int count[2], adaptive, best, timing;
    int seen[2];
    long steps;
    double avg[2], t0;
} cpu_threads;
void cpu_threads_init(cpu_threads *t, int max, int adaptive);
/* the most threads the backend runs with (its steps may use fewer) */
int cpu_max_threads(kb_backend *b);
/* the count for the next step (decode: one token); _end after it */
int cpu_threads_begin(cpu_threads *t, int decode);
void cpu_threads_end(cpu_threads *t);
/* Grows the backend's scratch buffer to at least `floats` floats; NULL (with error) on failure. */
float *cpu_scratch(kb_backend *b, size_t floats);
/* A second such buffer, for ops built from other kernels (which use the scratch). */
float *cpu_staging(kb_backend *b, size_t floats);

/* backend.h's pack: weights in f32, f16 or bf16 whose columns fill whole blocks in column blocks
 * (where the build has vectors), anything else as it is */
int cpu_pack(kb_backend *b, kb_mat *out, const kb_mat *w);
/* &W[k][j] of a matmul W in f32, f16 or bf16, row-major or in column blocks */
static inline const void *cpu_w_at(const kb_mat *w, int k, int j)
{
    size_t B = KB_COLUMN_BLOCK, at = !w->column_blocks
                                         ? (size_t)k * w->cols + j
                                         : (size_t)(j - j % B) * w->rows + (size_t)k * B + j % B;
    return (const char *)w->data + at * dt_elem(w->type);
}
int cpu_matmul(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
               kb_act act);
int cpu_matmul_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w);
int cpu_embed(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte,
              const kb_mat *wpe);
int cpu_layernorm(kb_backend *b, float *y, const float *x, const float *g, const float *beta, int n,
                  int C, float eps);
/* the tanh form of GELU, in place */
int cpu_gelu(kb_backend *b, float *x, size_t n);
int cpu_add_layernorm(kb_backend *b, float *y, float *x, const float *r, const float *g,
                      const float *beta, int n, int C, float eps);
int cpu_sample(kb_backend *b, int *out, const float *logits, int vocab, const kb_sample *s);
/* The rule's weights before its draw: q[vocab] gets each id's integer probability, 0 for the ids
 * top-k and top-p leave out, and *total their sum; returns the penalised argmax (the choice when
 * temp <= 0, when q is left unset and *total is 0). scratch: CPU_SAMPLE_SCRATCH(vocab) bytes. The
 * draw then takes the first id whose running sum exceeds floor(u * total). */
int cpu_sample_weights(const float *logits, int vocab, const kb_sample *s, void *scratch,
                       uint32_t *q, uint64_t *total);
/* the draw: the first id whose running sum of q exceeds floor(u * total); -1 when none does */
int cpu_sample_walk(const uint32_t *q, int vocab, uint64_t total, double u);
int cpu_odds(kb_backend *b, kb_odds *out, const float *logits, int n, int vocab, const kb_sample *s,
             const int *ids, const double *u_rest);
#define CPU_SAMPLE_SCRATCH(vocab) ((size_t)(vocab)*2 * 4 + ((size_t)(vocab) + 3) / 4 * 4)
/* The kept set's threshold over integer probabilities q[vocab] (top-k, then top-p): ids with q >=
 * it are kept. sel is vocab entries of scratch. The CUDA sampler's radix selection must find the
 * same. */
uint32_t cpu_sample_floor(const uint32_t *q, uint32_t *sel, int vocab, int top_k, float top_p);
/* The fused products' contracts (backend.h) as the reference kernels in sequence: the twin of
 * kernels/cuda/matvec.cu. The CPU backend itself leaves linear NULL (the same kernels run
 * either way); the tests install these to run the forward pass's fused route on the CPU. */
int cpu_linear(kb_backend *b, float *y, const float *x, int n, const kb_mat *w, const float *bias,
               const kb_norm *norm, kb_act act, int residual);
int cpu_linear_t(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                 const kb_norm *norm);
/* Up to this many tokens a product reads its weights once per call (decode: 16-bit rows streamed,
 * q8 integer tiles); more tokens go to OpenBLAS's GEMM, which re-reads them from cache. */
enum { CPU_STREAM_MAX_TOKENS = 8 };
/* The streamed products' loop (q8_tokens.c, q4.c, q6.c): each of the backend's threads takes its
 * run [j0, j1) of the N outputs (runs of G, the last thread's last one cut at N: a BODY stepping by
 * G meets a group of fewer outputs only there) and runs BODY(NT) over it with n's count as a
 * constant, 1 to CPU_STREAM_MAX_TOKENS (so that loops over the tokens unroll and the accumulators
 * stay in registers), then applies the GELU to its run of y [n, N] (act) */
#define CPU_STREAM_ROWS(b, y, n, N, G, act, BODY)                                   \
    _Pragma("omp parallel num_threads((b)->threads)")                               \
    {                                                                               \
        int id_ = omp_get_thread_num(), nt_ = omp_get_num_threads();                \
        int runs_ = ((N) + (G)-1) / (G);                                            \
        int j0 = (int)((long)runs_ * id_ / nt_) * (G);                              \
        int j1 = id_ + 1 == nt_ ? (N) : (int)((long)runs_ * (id_ + 1) / nt_) * (G); \
        switch (n) {                                                                \
            case 1: BODY(1) break;                                                  \
            case 2: BODY(2) break;                                                  \
            case 3: BODY(3) break;                                                  \
            case 4: BODY(4) break;                                                  \
            case 5: BODY(5) break;                                                  \
            case 6: BODY(6) break;                                                  \
            case 7: BODY(7) break;                                                  \
            default: BODY(CPU_STREAM_MAX_TOKENS) break;                             \
        }                                                                           \
        if ((act) == KB_GELU)                                                       \
            vm_gelu_columns(y, n, N, j0, j1);                                       \
    }
/* y[t][j] = out[t] (+ bias[j]) for n tokens, y's rows N apart: a streamed product's output j */
static inline void cpu_row_store(float *y, int N, int j, const float *out, const float *bias, int n)
{
    for (int t = 0; t < n; t++)
        y[(size_t)t * N + j] = (bias ? bias[j] : 0.0f) + out[t];
}
/* y[n, N] = x[n, K] . W (+ bias), W widened (or dequantised) to f32 a panel of CPU_PANEL columns at
 * a time by `panel` (output columns [c0, c1) as [K][c1 - c0]) into panels (room for K * CPU_PANEL
 * floats per thread, and CPU_PANEL more), each panel multiplied in cache as soon as it is made: by
 * 8x32 tiles of AVX-512 FMAs (tile.h; OpenBLAS's GEMM repacked each panel once more: a 128-token
 * prefill with f16 weights ran about 10% slower), by OpenBLAS without AVX-512. A column's result
 * depends on its panel only, not on the threads. */
enum { CPU_PANEL = 128 };
typedef void (*cpu_panel_fn)(float *dst, const kb_mat *w, int K, int c0, int c1);
int cpu_gemm_panels(kb_backend *b, float *y, const float *x, int n, int K, int N, const kb_mat *w,
                    const float *bias, cpu_panel_fn panel, float *panels);
/* dst = src rounded to bf16 (nearest even), as f32: what a product against bf16 weights multiplies
 * (kernels/cpu/matmul_bf16.c) */
void cpu_round_bf16(float *dst, const float *src, size_t n);
#ifdef __AVX512BF16__
/* y[n, N] = x[n, K] rounded to bf16 . W[K, N] in bf16 (+ bias), by AVX-512 BF16 dot products, a
 * panel of CPU_PANEL columns at a time; where the CPU lacks them, OpenBLAS on widened panels
 * computes the same */
#define CPU_BF16_GEMM 1
int cpu_bf16_gemm(kb_backend *b, float *y, const float *x, int n, const kb_mat *w,
                  const float *bias);
#endif
/* y[n, N] = act(x[n, K] . each of w's N stored rows of K (+ bias)): the product of 8-, 6- and 4-bit
 * weights (DT_Q8, DT_Q6, DT_Q4, stored along the reduction) against q8_0 activations, for matmul
 * (K = rows, N = cols) and matmul_t (K = cols, N = rows) */
int cpu_quant_product(kb_backend *b, float *y, const float *x, int n, int K, int N, const kb_mat *w,
                      const float *bias, kb_act act);
/* Its 4-bit parts (kernels/cpu/q4.c): the product for 1..CPU_STREAM_MAX_TOKENS tokens already
 * quantised (xq [n][K], block scales dx [n][K / 32]), each token's output the same for any n, in
 * room (cpu_q4_rows_room(n, K) floats); a GEMM panel of the dequantised values (a cpu_panel_fn);
 * and the K values (q - 8) of stored row `row` as int8 */
void cpu_q4_rows(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                 const kb_mat *w, const float *bias, kb_act act, void *room);
size_t cpu_q4_rows_room(int n, int K);
void cpu_q4_dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1);
void cpu_q4_values(int8_t *dst, const kb_mat *w, int row, int K);
float cpu_q4_scale(const kb_mat *w, int K, int row, int block); /* packed or not */
/* w (matmul's DT_Q4 W) packed in groups of CPU_Q4_GROUP output columns (backend.h) where the
 * build's kernel reads them so (AVX-512 VNNI), else out->data NULL */
enum { CPU_Q4_GROUP = 16 };
int cpu_q4_pack(kb_backend *b, kb_mat *out, const kb_mat *w);
/* Its 6-bit parts (kernels/cpu/q6.c), as the 4-bit ones: the product for a few tokens (room:
 * cpu_q6_rows_room(n, K) floats), a GEMM panel, the K values (q - 32) of stored row `row`, a
 * block's scale and the row's K values as floats, packed or not; and w (matmul_t's DT_Q6 [N, K]:
 * the token embedding) packed in groups of CPU_Q6_GROUP rows (backend.h) where the build's kernel
 * reads them so (AVX-512 VBMI and VNNI), else out->data NULL */
void cpu_q6_rows(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                 const kb_mat *w, const float *bias, kb_act act, void *room);
size_t cpu_q6_rows_room(int n, int K);
void cpu_q6_dequantize_panel(float *p, const kb_mat *w, int K, int c0, int c1);
void cpu_q6_values(int8_t *dst, const kb_mat *w, int row, int K);
float cpu_q6_scale(const kb_mat *w, int K, int row, int block);
void cpu_q6_row(float *dst, const kb_mat *w, int row, int K);
enum { CPU_Q6_GROUP = 16 };
int cpu_q6_pack(kb_backend *b, kb_mat *out, const kb_mat *w);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
/* y[n, N] for 2..CPU_STREAM_MAX_TOKENS tokens, already quantised (xq [n][K], their block scales
 * dx [n][K / 32]), each token's output bit for bit a one-token product's, each weight row read once
 * (kernels/cpu/q8_tokens.c); room: CPU_Q8_TOKENS_ROOM(n, K) floats */
#define CPU_Q8_TOKENS 1
#define CPU_Q8_TOKENS_ROOM(n, K) (((size_t)(n) * (K) + 3) / 4 + 16)
void cpu_q8_tokens(kb_backend *b, float *y, const int8_t *xq, const float *dx, int n, int K, int N,
                   const kb_mat *w, const float *bias, kb_act act, float *room);
#endif
int cpu_attention(kb_backend *b, float *y, const float *qkv, const kb_kv *kv, int layer, int past,
                  int n, const kb_probe *probe);

#endif
