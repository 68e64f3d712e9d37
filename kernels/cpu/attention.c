#include <math.h>
#include <omp.h>
#include <string.h>

#include "cpu.h"
#include "vecmath.h"

int cpu_attention(kb_backend *b, float *y, const float *qkv, float *kc, float *vc, int past, int n, int n_head, int C)
{
    int hd = C / n_head, T = past + n;
    for (int t = 0; t < n; t++) {
        memcpy(kc + (size_t)(past + t) * C, qkv + (size_t)t * 3 * C + C, sizeof(float) * C);
        memcpy(vc + (size_t)(past + t) * C, qkv + (size_t)t * 3 * C + 2 * C, sizeof(float) * C);
    }
    float *scores = cpu_scratch(b, (size_t)T * b->threads);
    if (!scores)
        return -1;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(b->threads)
    for (int h = 0; h < n_head; h++)
        for (int t = 0; t < n; t++) {
            float *s = scores + (size_t)T * omp_get_thread_num();
            const float *q = qkv + (size_t)t * 3 * C + (size_t)h * hd;
            int len = past + t + 1;
            float mx = -INFINITY;
            for (int j = 0; j < len; j++) {
                const float *k = kc + (size_t)j * C + (size_t)h * hd;
                float d = 0;
#pragma omp simd reduction(+ : d)
                for (int c = 0; c < hd; c++)
                    d += q[c] * k[c];
                s[j] = d * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < len; j++) {
                s[j] = vm_expf(s[j] - mx);
                sum += s[j];
            }
            float *o = y + (size_t)t * C + (size_t)h * hd;
            memset(o, 0, sizeof(float) * hd);
            for (int j = 0; j < len; j++) {
                const float *v = vc + (size_t)j * C + (size_t)h * hd;
                float p = s[j];
                for (int c = 0; c < hd; c++)
                    o[c] += p * v[c];
            }
            float inv = 1.0f / sum;
            for (int c = 0; c < hd; c++)
                o[c] *= inv;
        }
    return 0;
}
