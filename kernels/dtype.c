#include "dtype.h"

#include <strings.h>

size_t dt_size(dtype t)
{
    return dt_elem(t);
}

const char *dt_name(dtype t)
{
    return t == DT_F32 ? "f32" : t == DT_F16 ? "f16" : t == DT_BF16 ? "bf16" : "int8";
}

int dt_parse(const char *s, dtype *out)
{
    static const struct { const char *name; dtype t; } names[] = {
        {"f32", DT_F32}, {"float32", DT_F32}, {"f16", DT_F16}, {"float16", DT_F16},
        {"bf16", DT_BF16}, {"bfloat16", DT_BF16}, {"int8", DT_I8}, {"i8", DT_I8},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(s, names[i].name)) {
            *out = names[i].t;
            return 0;
        }
    return -1;
}

void dt_to_f32(float *dst, const void *src, dtype t, size_t n)
{
    const uint16_t *h = src;
    switch (t) {
    case DT_F32:
        memcpy(dst, src, n * 4);
        break;
    case DT_BF16:
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
        for (size_t i = 0; i < n; i++)
            dst[i] = dt_bf16_to_f32(h[i]);
        break;
    case DT_F16:
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
        for (size_t i = 0; i < n; i++)
            dst[i] = dt_f16_to_f32(h[i]);
        break;
    case DT_I8:
        for (size_t i = 0; i < n; i++)
            dst[i] = ((const int8_t *)src)[i];
        break;
    }
}

void dt_from_f32(void *dst, const float *src, dtype t, size_t n)
{
    uint16_t *h = dst;
    switch (t) {
    case DT_F32:
        memcpy(dst, src, n * 4);
        break;
    case DT_BF16:
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
        for (size_t i = 0; i < n; i++)
            h[i] = dt_f32_to_bf16(src[i]);
        break;
    case DT_F16:
#pragma omp parallel for if (n > (1u << 16)) schedule(static)
        for (size_t i = 0; i < n; i++)
            h[i] = dt_f32_to_f16(src[i]);
        break;
    case DT_I8:
        for (size_t i = 0; i < n; i++)
            ((int8_t *)dst)[i] = (int8_t)(src[i] > 127 ? 127 : src[i] < -127 ? -127 : __builtin_rintf(src[i]));
        break;
    }
}
