/* What the downloader's files share (download.c: transfers, resumes and checks; head.c: the hub's
 * HEAD request). Nothing else includes it. */
#ifndef KVCHAT_HUB_CURL_H
#define KVCHAT_HUB_CURL_H

#include <curl/curl.h>

#include "download.h"

enum { MAX_HOPS = 5 }; /* redirects followed by hand */

/* a handle for url with what every request takes (user agent, http(s) only, timeouts, HF_TOKEN's
 * header); errbuf gets libcurl's message */
CURL *dl_easy(const char *url, char *errbuf);
/* the error of a transfer that ended in r (an HTTP error by its code), named for url; -1 */
int dl_fail(CURL *c, CURLcode r, const char *errbuf, const char *url);

#endif
