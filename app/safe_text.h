/* Writing untrusted text (model output, file contents) to a terminal: control characters and escape
 * sequences are shown as visible caret notation (^[, ^G, ...) instead of being interpreted. */
#ifndef KVCHAT_SAFE_TEXT_H
#define KVCHAT_SAFE_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* When `raw` is set the bytes are written unchanged (a pipe or file wants the real text). */
void safe_fwrite(FILE *f, const char *s, size_t n, int raw);
/* s as one line of visible text in dst (cap bytes, cut short to fit; newlines too become ^J):
 * for a string from a file or a server inside a message or a table. Returns dst. */
const char *safe_copy(char *dst, size_t cap, const char *s);

#endif
