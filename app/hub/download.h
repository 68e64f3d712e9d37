/* HTTP downloads through libcurl: what the server says of a file before fetching it, and a fetch
 * into DST.part that resumes a partial file, shows progress, checks size and SHA-256 when they are
 * known, and renames into place only then. */
#ifndef KVCHAT_DOWNLOAD_H
#define KVCHAT_DOWNLOAD_H

#include <stdint.h>

/* What a HEAD request learnt: found (0: 404), and for large files kept in Git LFS the size and
 * SHA-256 (lowercase hex) the hub reports in X-Linked-Size and X-Linked-Etag; then what the caller
 * accepts of it. */
typedef struct {
    int found;
    int64_t size;    /* -1: not said */
    char sha256[65]; /* "": not said */
    int64_t max;     /* with no size said: the most bytes a file may have, 0: any */
    /* what arrived, at PATH, is the file it should be (0; else -1 with the error) before it is
     * renamed into place; NULL: no check */
    int (*check)(const char *path);
} dl_info;

/* seconds: the connect, header and small-file time limit, and the low-speed window
 * ($KVCHAT_HTTP_TIMEOUT, default 60) */
int dl_timeout(void);

/* Once per process, before any other call; dl_done after the last. */
int dl_init(void);
void dl_done(void);
/* HEAD URL without following the redirect to the content server, whose reply carries the metadata
 * (relative redirects, a renamed repository, are followed). A 404 is found = 0, not an error. */
int dl_head(const char *url, dl_info *out);
/* GET URL into DST (through DST.part); `info` (may be NULL) is what must arrive. `label` names the
 * file in the progress line. Refused, with the part removed: an HTML page (a captive portal or a
 * login page), more bytes than announced (the size, the reply's Content-Length, or info->max), a
 * file that fails info->check, a transfer that would leave the disk less than 256 MiB; and before
 * anything is fetched, a size the disk has no room for.
 * Returns 0, or -1 with an error naming the URL or file; a 404 sets *missing when missing is not
 * NULL. */
int dl_fetch(const char *url, const char *dst, const dl_info *info, const char *label,
             int *missing);

#endif
