/* Numbers as the panel shows them. */
#ifndef KVCHAT_UI_FORMAT_H
#define KVCHAT_UI_FORMAT_H

#include <stddef.h>

/* 512 B, 36.0 KiB, 14.8 MiB, 1.2 GiB */
char *fmt_bytes(char *buf, size_t n, double bytes);
/* 0.8 tok/s, 52.1 tok/s, 1234 tok/s */
char *fmt_rate(char *buf, size_t n, double per_s);
/* 0.02 ms, 41 ms, 1.9 s */
char *fmt_ms(char *buf, size_t n, double ms);
/* The fewest tokens a rate is shown for: over fewer (a retry's one-token prompt) it would be a
 * number that means nothing, so the time is shown instead. */
enum { FMT_RATE_MIN_TOKENS = 8 };
/* tokens in ms as a rate ("52.1 tok/s"), or, over fewer than FMT_RATE_MIN_TOKENS, as what they
 * took ("1 tok in 52 ms") */
char *fmt_speed(char *buf, size_t n, int tokens, double ms);

#endif
