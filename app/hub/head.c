/* The hub's HEAD request for a file: its size and ETag as the hub says them (X-Linked-Size,
 * X-Linked-Etag: an LFS file's SHA-256), asked without following the redirect to the content server,
 * hop by hop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../kernels/err.h"
#include "hub_curl.h"

typedef struct {
    dl_info *info;
    char location[2048];
} head_state;

static size_t on_header(char *line, size_t size, size_t n, void *ctx)
{
    head_state *h = ctx;
    size_t len = size * n, k;
    char v[2048];
    const char *colon = memchr(line, ':', len);
    if (!colon || len >= sizeof v)
        return len;
    k = (size_t)(colon - line);
    const char *p = colon + 1, *end = line + len;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    snprintf(v, sizeof v, "%.*s", (int)(end - p), p);
    if (k == 13 && !strncasecmp(line, "X-Linked-Size", k)) {
        char *e;
        long long s = strtoll(v, &e, 10);
        h->info->size = *v && !*e && s >= 0 ? s : -1;
    } else if (k == 13 && !strncasecmp(line, "X-Linked-Etag", k)) {
        const char *q =
            v + (v[0] == 'W' && v[1] == '/') * 2; /* the hub quotes it, a proxy may weaken it */
        q += *q == '"';
        size_t hex = strspn(q, "0123456789abcdef");
        if (hex == 64)
            snprintf(h->info->sha256, sizeof h->info->sha256, "%.64s", q);
    } else if (k == 8 && !strncasecmp(line, "Location", k)) {
        snprintf(h->location, sizeof h->location, "%s", v);
    }
    return len;
}

int dl_head(const char *url, dl_info *out)
{
    char cur[4096], errbuf[CURL_ERROR_SIZE];
    snprintf(cur, sizeof cur, "%s", url);
    for (int hop = 0; hop < MAX_HOPS; hop++) {
        *out = (dl_info){.size = -1};
        head_state h = {.info = out};
        CURL *c = dl_easy(cur, errbuf);
        if (!c)
            return -1;
        CURLcode r = curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        r = r ? r : curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)dl_timeout()); /* headers only */
        r = r ? r : curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        r = r ? r : curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
        r = r ? r : curl_easy_perform(c);
        long code = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        if (r) {
            int rc = dl_fail(c, r, errbuf, cur);
            curl_easy_cleanup(c);
            return rc;
        }
        curl_easy_cleanup(c);
        if (code == 404) {
            out->found = 0;
            return 0;
        }
        if (code >= 400)
            return err_set("asking %s: HTTP %ld%s", cur, code,
                           code == 401 || code == 403
                               ? " (a gated or private repository: set HF_TOKEN to an access token)"
                               : "");
        out->found = 1;
        /* the hub's own relative redirect (a renamed repository) is followed; one to the content
         * server carries the metadata already */
        if (code < 300 || code >= 400 || out->sha256[0] || h.location[0] != '/')
            return 0;
        const char *host = strstr(cur, "://");
        const char *path = host ? strchr(host + 3, '/') : NULL;
        size_t origin = path ? (size_t)(path - cur) : strlen(cur);
        char next[4096];
        snprintf(next, sizeof next, "%.*s%s", (int)origin, cur, h.location);
        snprintf(cur, sizeof cur, "%s", next);
    }
    return err_set("asking %s: more than %d redirects", url, MAX_HOPS);
}

/* ---- fetching ---- */
