/* File-system helpers for the commands that write files. */
#ifndef KVCHAT_FILES_H
#define KVCHAT_FILES_H

/* mkdir -p */
int make_dirs(const char *path);
/* Copies src to dst through dst.part, renamed when complete. */
int copy_file(const char *src, const char *dst);

#endif
