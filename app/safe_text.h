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

/* s made valid UTF-8: each byte that is not part of a well-formed sequence is read as the Latin-1
 * character it would be (0xE9: "é"), as a Latin-1 terminal or file meant it; *fixed counts them.
 * A new string, or NULL when out of memory (with the error). */
char *utf8_from_latin1(const char *s, int *fixed);
/* buf = "WHAT had N byte(s) that is/are not UTF-8: read as Latin-1 (0xE9: é)": how each such
 * reading is said */
const char *latin1_said(char *buf, size_t n, const char *what, int bytes);

#endif
