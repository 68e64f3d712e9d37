#include "format.h"

#include <stdio.h>

char *fmt_bytes(char *buf, size_t n, double bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while ((bytes >= 1024 || bytes <= -1024) && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

char *fmt_rate(char *buf, size_t n, double per_s)
{
    snprintf(buf, n, per_s < 100 ? "%.1f tok/s" : "%.0f tok/s", per_s);
    return buf;
}

char *fmt_ms(char *buf, size_t n, double ms)
{
    if (ms >= 1000)
        snprintf(buf, n, "%.1f s", ms / 1000);
    else if (ms >= 10)
        snprintf(buf, n, "%.0f ms", ms);
    else
        snprintf(buf, n, "%.2f ms", ms);
    return buf;
}

char *fmt_speed(char *buf, size_t n, int tokens, double ms)
{
    char t[32];
    if (tokens >= FMT_RATE_MIN_TOKENS && ms > 0)
        return fmt_rate(buf, n, tokens / (ms / 1e3));
    snprintf(buf, n, "%d tok in %s", tokens, fmt_ms(t, sizeof t, ms));
    return buf;
}
