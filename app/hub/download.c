#include "hub_curl.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../files.h"

enum { RETRIES = 3 };

static struct curl_slist
    *headers; /* Authorization from HF_TOKEN, for gated or private repositories */

int dl_init(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT))
        return err_set("libcurl failed to start");
    const char *token = getenv("HF_TOKEN");
    if (token && strpbrk(token, "\r\n")) /* it would end the header and start another */
        return err_set("HF_TOKEN holds a line break: it is not an access token");
    if (token && *token) {
        char h[1024];
        snprintf(h, sizeof h, "Authorization: Bearer %s", token);
        if (!(headers = curl_slist_append(NULL, h)))
            return err_set("out of memory");
    }
    return 0;
}

void dl_done(void)
{
    curl_slist_free_all(headers);
    headers = NULL;
    curl_global_cleanup();
}

int dl_timeout(void)
{
    const char *v = getenv("KVCHAT_HTTP_TIMEOUT");
    int s = v && *v ? atoi(v) : 0;
    return s > 0 && s <= 3600 ? s : 60;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void mib(char *buf, size_t n, double bytes)
{
    snprintf(buf, n, bytes >= 1 << 30 ? "%.2f GiB" : "%.1f MiB",
             bytes / (bytes >= 1 << 30 ? 1 << 30 : 1 << 20));
}

/* A transfer's options; errors collected, so one check covers them all. The token is sent to the
 * hub only: curl drops custom Authorization headers when a redirect leaves the host. */
CURL *dl_easy(const char *url, char *errbuf)
{
    CURL *c = curl_easy_init();
    if (!c) {
        err_set("libcurl could not start a transfer");
        return NULL;
    }
    errbuf[0] = 0;
    CURLcode r = curl_easy_setopt(c, CURLOPT_URL, url);
    r = r ? r : curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    r = r ? r : curl_easy_setopt(c, CURLOPT_USERAGENT, "kvchat");
    r = r ? r : curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    long limit = dl_timeout();
    r = r ? r : curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, limit < 20 ? limit : 20L);
    /* a server that goes quiet, or trickles: under 1 KiB/s for the whole window */
    r = r ? r : curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    r = r ? r : curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, limit);
    r = r ? r : curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    if (r) {
        err_set("libcurl: %s", curl_easy_strerror(r));
        curl_easy_cleanup(c);
        return NULL;
    }
    return c;
}

/* curl's failure as a sentence that says what to do */
int dl_fail(CURL *c, CURLcode r, const char *errbuf, const char *url)
{
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    const char *offline = "; without a network, pass -m DIR with a local checkpoint, or try the "
                          "offline demo: make demo";
    switch (r) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
            return err_set("downloading %s: could not resolve the host (no network or DNS?)%s", url,
                           offline);
        case CURLE_COULDNT_CONNECT:
            return err_set("downloading %s: could not connect (no network, or a firewall?)%s", url,
                           offline);
        case CURLE_OPERATION_TIMEDOUT:
            return err_set("downloading %s: the connection timed out", url);
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CACERT_BADFILE:
            return err_set("downloading %s: TLS failed (%s; check the system's CA certificates)",
                           url, errbuf[0] ? errbuf : curl_easy_strerror(r));
        case CURLE_HTTP_RETURNED_ERROR:
            return err_set("downloading %s: HTTP %ld%s", url, code,
                           code == 401 || code == 403
                               ? " (a gated or private repository: set HF_TOKEN to an access token)"
                           : code == 404 ? " (no such repository or file)"
                           : code == 429 ? " (too many requests: try again later)"
                           : code >= 500 ? " (the server failed: try again later)"
                                         : "");
        default:
            return err_set("downloading %s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(r));
    }
}

/* ---- metadata ---- */

/* A download stops before the disk it writes to has less than DISK_RESERVE left, looked at every
 * DISK_LOOK bytes: the rest of the machine must go on working */
#define DISK_RESERVE (256.0 * (1 << 20))
enum { DISK_LOOK = 16 << 20 };

typedef struct {
    int fd;
    CURL *c;
    int64_t offset; /* bytes the .part held when this transfer began */
    int64_t total;  /* what must arrive, when known */
    int64_t limit;  /* the most the file may have: announced, or a small file's cap (0: any) */
    int64_t got;    /* bytes of this transfer */
    const char *label;
    int tty;
    double start, drawn;
    int failed_errno;
    const char *part;
    int64_t checked;     /* bytes of this transfer when the disk's free space was last looked at */
    const char *refused; /* why the reply is not the file (the part is removed) */
    const char *stalled; /* why the server was given up on (the part is kept) */
} transfer;

static void draw(transfer *t, int64_t have, int64_t total, const char *verb, int done)
{
    double el = now() - t->start;
    if (!t->tty || (!done && el - t->drawn < 0.1))
        return;
    t->drawn = el;
    char a[32], b[32], rate[32] = "", left[32] = "", bar[21];
    double frac = total > 0 ? (double)have / total : 0,
           speed = el > 0.2 ? (have - t->offset) / el : 0;
    for (int i = 0; i < 20; i++)
        bar[i] = i < (int)(frac * 20 + 1e-9) ? '#' : '.';
    bar[20] = 0;
    mib(a, sizeof a, (double)have);
    mib(b, sizeof b, (double)total);
    if (speed > 0) {
        snprintf(rate, sizeof rate, "  %.1f MiB/s", speed / (1 << 20));
        if (total > 0 && !done) {
            long s = (long)((total - have) / speed);
            snprintf(left, sizeof left, "  %ld:%02ld left", s / 60, s % 60);
        }
    }
    fprintf(stderr, "\r\033[K%s %-20s [%s] %3d%%  %s / %s%s%s%s", verb, t->label, bar,
            (int)(frac * 100), a, total > 0 ? b : "?", rate, left, done ? "\n" : "");
}

static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ut,
                       curl_off_t un)
{
    (void)ut, (void)un;
    transfer *t = ctx;
    if (!t->got && now() - t->start > dl_timeout()) { /* headers trickled, or nothing came */
        t->stalled = "given up: no data within the time limit for headers (KVCHAT_HTTP_TIMEOUT)";
        return 1;
    }
    draw(t, t->offset + dlnow,
         t->total >= 0 ? t->total
         : dltotal     ? t->offset + dltotal
                       : -1,
         "fetching ", 0);
    return 0;
}

/* the reply as a whole, seen at its first bytes: a page is not a file */
static const char *refuse_reply(transfer *t)
{
    const char *type = NULL;
    curl_easy_getinfo(t->c, CURLINFO_CONTENT_TYPE, &type);
    if (type && (!strncasecmp(type, "text/html", 9) || !strncasecmp(type, "application/xhtml", 17)))
        return "the server sent an HTML page (a captive portal or a login page?), not the file";
    curl_off_t cl = -1;
    curl_easy_getinfo(t->c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
    if (cl >= 0 && t->limit > 0 && t->offset + cl > t->limit)
        return "the reply is longer than the file can be (its announced size, or the cap of a "
               "small file)";
    return NULL;
}

static size_t on_data(char *data, size_t size, size_t n, void *ctx)
{
    transfer *t = ctx;
    size_t len = size * n, done = 0;
    if (!t->got && (t->refused = refuse_reply(t)))
        return 0;
    t->got += (int64_t)len;
    if (t->limit > 0 && t->offset + t->got > t->limit) {
        t->refused = "the server sent more than the file can be (its announced size, or the cap "
                     "of a small file or of weights of no announced size)";
        return 0;
    }
    if (t->got - t->checked >=
        DISK_LOOK) { /* a server may send more than it said, or say nothing */
        struct statvfs vs;
        t->checked = t->got;
        if (!statvfs(t->part, &vs) && (double)vs.f_bavail * vs.f_frsize < DISK_RESERVE) {
            t->refused = "stopped with less than 256 MiB left on the disk (the file is larger "
                         "than the room there); the part was removed";
            return 0;
        }
    }
    while (done < len) {
        ssize_t w = write(t->fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            t->failed_errno = w < 0 ? errno : ENOSPC;
            return 0;
        }
        done += (size_t)w;
    }
    return len;
}

/* One GET of what the part lacks. Returns 0 done, 1 broke off (worth resuming), -1 failed. */
static int get_once(const char *url, const char *part, transfer *t, int *missing)
{
    char errbuf[CURL_ERROR_SIZE];
    /* a part resumes where it stopped, so it is appended to; a link planted there is not */
    t->fd = open(part, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (t->fd < 0)
        return err_set("%s: %s", part,
                       errno == ELOOP ? "a symbolic link, not followed (remove it)"
                                      : strerror(errno));
    CURL *c = dl_easy(url, errbuf);
    if (!c) {
        close(t->fd);
        return -1;
    }
    t->failed_errno = 0;
    t->got = t->checked = 0;
    t->refused = t->stalled = NULL;
    t->c = c;
    CURLcode r = curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    if (t->limit > 0 && t->total < 0) /* a small file: all of it within the time limit */
        r = r ? r : curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)dl_timeout());
    r = r ? r : curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_HOPS);
    r = r ? r : curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    r = r ? r : curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)t->offset);
    r = r ? r : curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    r = r ? r : curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
    r = r ? r : curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    r = r ? r : curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    r = r ? r : curl_easy_setopt(c, CURLOPT_XFERINFODATA, t);
    r = r ? r : curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    int rc = 0;
    if (!t->stalled && r == CURLE_OPERATION_TIMEDOUT && !t->got) /* a small file's, or a HEAD's */
        t->stalled = "given up: no data within the time limit for headers (KVCHAT_HTTP_TIMEOUT)";
    if (t->refused || t->stalled)
        rc = err_set("downloading %s: %s", url, t->refused ? t->refused : t->stalled);
    else if (t->failed_errno)
        rc = err_set("%s: %s", part, strerror(t->failed_errno));
    else if (t->offset &&
             (r == CURLE_RANGE_ERROR || (r == CURLE_HTTP_RETURNED_ERROR && code == 416)))
        /* a server that cannot resume, or a part that is not a prefix of this file: start over */
        rc = ftruncate(t->fd, 0) ? err_set("%s: %s", part, strerror(errno))
                                 : (err_set("%s: cannot resume", url), 1);
    else if (r == CURLE_PARTIAL_FILE || r == CURLE_RECV_ERROR || r == CURLE_GOT_NOTHING ||
             r == CURLE_OPERATION_TIMEDOUT || r == CURLE_SEND_ERROR)
        rc = (dl_fail(c, r, errbuf, url), 1);
    else if (r) {
        if (missing)
            *missing = r == CURLE_HTTP_RETURNED_ERROR && code == 404;
        rc = dl_fail(c, r, errbuf, url);
    }
    if (fsync(t->fd) && !rc) /* the rename into place must not land before the bytes */
        rc = err_set("%s: %s", part, strerror(errno));
    if (close(t->fd) && !rc)
        rc = err_set("%s: %s", part, strerror(errno));
    if (rc < 0 && (t->refused || file_size(part) == 0)) /* not the file, or nothing: no trace */
        unlink(part);
    curl_easy_cleanup(c);
    return rc;
}

static int sha256_file(const char *path, transfer *t, int64_t total, char hex[65])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set("%s: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK), md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    int64_t done = 0;
    ssize_t n = 0;
    t->start = now(), t->drawn = -1, t->offset = 0;
    while (ok && buf && (n = read(fd, buf, CHUNK)) > 0) {
        ok = EVP_DigestUpdate(ctx, buf, (size_t)n);
        done += n;
        draw(t, done, total, "verifying", 0);
    }
    int rd = n < 0 ? errno : 0;
    ok = ok && buf && !rd && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
    draw(t, done, total, "verifying", 1);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    if (!ok)
        return err_set("%s: %s", path, rd ? strerror(rd) : "computing its SHA-256 failed");
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", md[i]);
    return 0;
}

/* the free space of the folder dst goes in, against `need` more bytes */
static int room_for(const char *dst, int64_t need)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", dst);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    struct statvfs vs;
    if (statvfs(slash ? (*dir ? dir : "/") : ".", &vs))
        return 0; /* unknown: the write will say */
    double free_b = (double)vs.f_bavail * (double)vs.f_frsize;
    if (free_b >= (double)need)
        return 0;
    char a[32], b[32];
    mib(a, sizeof a, (double)need);
    mib(b, sizeof b, free_b);
    return err_set("%s: not enough free space: it needs %s more, and %s are free there", dst, a, b);
}

/* The bytes a part holds (-1: none yet), never through a link: a link planted at PATH.part is
 * refused before anything reads, sizes or truncates what it points to (-2, with the error) */
static long long part_size(const char *part)
{
    struct stat sb;
    if (lstat(part, &sb))
        return errno == ENOENT ? -1 : (err_set("%s: %s", part, strerror(errno)), -2);
    if (!S_ISREG(sb.st_mode))
        return err_set("%s: %s", part,
                       S_ISLNK(sb.st_mode) ? "a symbolic link, not followed (remove it)"
                                           : "not a regular file (remove it)"),
               -2;
    return (long long)sb.st_size;
}

/* the part emptied through a descriptor that refuses a link */
static int part_empty(const char *part)
{
    int fd = open(part, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    int rc = fd < 0 || ftruncate(fd, 0) ? err_set("%s: %s", part, strerror(errno)) : 0;
    if (fd >= 0)
        close(fd);
    return rc;
}

int dl_fetch(const char *url, const char *dst, const dl_info *info, const char *label, int *missing)
{
    char part[PATH_MAX + 8];
    snprintf(part, sizeof part, "%s.part", dst);
    int64_t want = info ? info->size : -1;
    transfer t = {.label = label,
                  .part = part,
                  .total = want,
                  .tty = isatty(STDERR_FILENO),
                  .limit = want >= 0 ? want
                           : info    ? info->max
                                     : 0};
    if (missing)
        *missing = 0;
    long long held = part_size(part);
    if (held < -1 || (want >= 0 && room_for(dst, want - (held > 0 ? held : 0))))
        return -1;
    for (int attempt = 0;; attempt++) {
        long long have = part_size(part);
        if (have < -1)
            return -1;
        int exists = have >= 0;
        have = have < 0 ? 0 : have;
        if (want >= 0 && have > want) { /* longer than the file: not a part of it */
            if (part_empty(part))
                return -1;
            have = 0;
        }
        if (want >= 0 && have == want && exists)
            break;
        t.offset = have, t.start = now(), t.drawn = -1;
        int r = get_once(url, part, &t, missing);
        if (r < 0)
            return -1;
        long long got = part_size(part);
        if (got < -1)
            return -1;
        if (!r && (want < 0 || got == want))
            break;
        if (!r) /* curl saw the whole reply, shorter or longer than the hub's size */
            r = 1, err_set("downloading %s: %lld bytes arrived where the hub says %lld", url, got,
                           (long long)want);
        if (attempt + 1 >= RETRIES) {
            char a[32], b[32], why[1024];
            mib(a, sizeof a, (double)(got < 0 ? 0 : got));
            mib(b, sizeof b, (double)want);
            snprintf(why, sizeof why, "%s", err_msg());
            return err_set("%s; stopped at %s%s%s, kept in %s: run the same command to resume", why,
                           a, want >= 0 ? " of " : "", want >= 0 ? b : "", part);
        }
        if (t.tty)
            fprintf(stderr, "\r\033[K%s broke off (%s); resuming\n", label, err_msg());
        sleep((unsigned)attempt + 1);
    }
    draw(&t, part_size(part), want >= 0 ? want : part_size(part), "fetching ", 1);
    if (info && info->sha256[0]) {
        char got[65];
        if (sha256_file(part, &t, want, got))
            return -1;
        if (strcmp(got, info->sha256)) {
            unlink(part);
            return err_set("%s: SHA-256 %s does not match the hub's %s; the download was removed "
                           "(run again to "
                           "fetch it anew)",
                           label, got, info->sha256);
        }
    }
    if (info && info->check && info->check(part)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", err_msg());
        unlink(part);
        return err_set("%s: %s; the download was removed", label, why);
    }
    if (rename(part, dst))
        return err_set("%s: cannot rename into place: %s", dst, strerror(errno));
    return 0;
}
