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

#endif
