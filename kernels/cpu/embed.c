#include "cpu.h"

int cpu_embed(kb_backend *b, float *x, const int *ids, int n, int pos0, const kb_mat *wte,
              const kb_mat *wpe)
{
    int C = wte->cols;
    size_t es = dt_size(wte->type), ps = dt_size(wpe->type);
#pragma omp parallel for num_threads(b->threads) if (n > 16)
    for (int i = 0; i < n; i++) {
        float *row = x + (size_t)i * C, tmp[256];
        const char *te = (const char *)wte->data + (size_t)ids[i] * C * es;
        const char *pe = (const char *)wpe->data + (size_t)(pos0 + i) * C * ps;
        if (wte->type == DT_Q6) /* packed or not */
            cpu_q6_row(row, wte, ids[i], C);
        else if (wte->type == DT_Q8) /* blocks of 32 along the row, an f16 scale each */
            for (int j = 0; j < C; j++)
                row[j] = (float)((const int8_t *)te)[j] *
                         dt_f16_to_f32(wte->scales[((size_t)ids[i] * C + j) / DT_Q8_BLOCK]);
        else
            dt_to_f32(row, te, wte->type, (size_t)C);
        for (int c = 0; c < C; c += 256) { /* then the position's row, widened a piece at a time */
            int m = C - c < 256 ? C - c : 256;
            dt_to_f32(tmp, pe + (size_t)c * ps, wpe->type, (size_t)m);
            for (int j = 0; j < m; j++)
                row[c + j] += tmp[j];
        }
    }
    return 0;
}
