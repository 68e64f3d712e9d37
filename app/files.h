/* File-system helpers for the commands that write files. */
#ifndef KVCHAT_FILES_H
#define KVCHAT_FILES_H

/* mkdir -p */
int make_dirs(const char *path);
/* mkdir -p of the folder a file path is in */
int make_parent_dirs(const char *file);
/* Copies src to dst through dst.part, renamed when complete. */
int copy_file(const char *src, const char *dst);

#endif
