#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "../kernels/err.h"

#ifndef KVCHAT_ASSETS
#define KVCHAT_ASSETS "assets"
#endif

int make_dirs(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set("%.64s...: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p && *p != '/')
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return err_set("%s: %s", buf, strerror(errno));
        *p = c;
        if (!c)
            break;
    }
    struct stat sb;
    if (stat(path, &sb) || !S_ISDIR(sb.st_mode))
        return err_set("%s: not a directory", path);
    return 0;
}

int make_parent_dirs(const char *file)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = 0;
    return make_dirs(dir);
}

int user_path(char *buf, size_t n, const char *path)
{
    const char *home = getenv("HOME");
    int w, tilde = path[0] == '~' && (path[1] == '/' || !path[1]);
    if (tilde && !(home && *home))
        return err_set("%s: HOME is not set, so ~ names no folder", path);
    w = tilde ? snprintf(buf, n, "%s%s", home, path + 1) : snprintf(buf, n, "%s", path);
    if (w < 0 || (size_t)w >= n)
        return err_set("%.64s...: path too long", path);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", buf);
    char *slash = strrchr(dir, '/');
    struct stat sb;
    if (slash && slash != dir) {
        *slash = 0;
        if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
            return err_set("%s: the folder %s does not exist", path, dir);
    }
    return 0;
}

int xdg_path(char *buf, size_t n, const char *env, const char *fallback, const char *rel,
             const char *instead)
{
    const char *xdg = getenv(env), *home = getenv("HOME");
    int w;
    if (xdg && *xdg)
        w = snprintf(buf, n, "%s/kvchat/%s", xdg, rel);
    else if (home && *home)
        w = snprintf(buf, n, "%s/%s/kvchat/%s", home, fallback, rel);
    else
        return err_set("neither %s nor HOME is set; %s", env, instead);
    return w < 0 || (size_t)w >= n ? err_set("%.64s...: path too long", buf) : 0;
}

int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) ? -1 : (long long)sb.st_size;
}

int file_claim(const char *path, int force, const char *force_hint, int *fd)
{
    struct stat sb;
    const char *why = NULL;
    int exists = 0;
    /* O_NONBLOCK: a FIFO there must not hang the open */
    if ((*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
        return errno == ENOENT ? 0 : err_set("%s: %s", path, strerror(errno));
    if (fstat(*fd, &sb) || !S_ISREG(sb.st_mode))
        why = "is not a regular file";
    else if (flock(*fd, LOCK_EX | LOCK_NB))
        why = errno == EWOULDBLOCK
                  ? "is being written by another kvchat (a live session or event log); it is "
                    "never replaced"
                  : strerror(errno);
    else
        exists = !force && sb.st_size > 0;
    if (!why && !exists)
        return 0;
    close(*fd);
    *fd = -1;
    return why ? err_set("%s %s", path, why) : err_set("%s already exists; %s", path, force_hint);
}

int part_open(part_file *p, const char *path)
{
    p->path = path;
    struct stat sb;
    p->direct = !stat(path, &sb) && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode);
    if (p->direct) {
        if (!(p->f = fopen(path, "wb")))
            return err_set("%s: %s", path, strerror(errno));
        return 0;
    }
    if (snprintf(p->tmp, sizeof p->tmp, "%s.part", path) >= (int)sizeof p->tmp)
        return err_set("%.64s...: path too long", path);
    /* a part is this program's own: one left by a killed write goes, and so does a link planted
     * there (removed, never followed); then the part is made anew, so nothing else is written */
    if (unlink(p->tmp) && errno != ENOENT)
        return err_set("%s: cannot remove: %s", p->tmp, strerror(errno));
    int fd = open(p->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || !(p->f = fdopen(fd, "wb"))) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return err_set("%s: %s", p->tmp, strerror(err));
    }
    return 0;
}

int dump_claim(const char *path, long long row, const char *input)
{
    struct stat sb;
    int lock;
    if (input && same_file(path, input))
        return err_set("%s is the file being read: choose another name", path);
    if (lstat(path, &sb) || !S_ISREG(sb.st_mode)) /* a FIFO or a device is written into */
        return 0;
    if (file_claim(path, 1, "", &lock)) /* a live session: never replaced */
        return -1;
    if (lock >= 0)
        close(lock);
    if (sb.st_size % row)
        return err_set("%s exists and is not a logits dump (%lld bytes, not whole rows of %lld): "
                       "remove it or choose another name",
                       path, (long long)sb.st_size, row);
    return 0;
}

int part_commit(part_file *p, int ok)
{
    int err =
        ok && (ferror(p->f) || fflush(p->f) || (!p->direct && fsync(fileno(p->f)))) ? errno : 0;
    if (fclose(p->f) && ok && !err)
        err = errno;
    p->f = NULL;
    if (p->direct)
        return !ok ? -1 : err ? err_set("%s: cannot write: %s", p->path, strerror(err)) : 0;
    int lock = -1;
    if (ok && !err && file_claim(p->path, 1, "", &lock)) { /* held over the rename */
        unlink(p->tmp);
        return -1;
    }
    if (ok && !err && rename(p->tmp, p->path))
        err = errno;
    if (lock >= 0)
        close(lock);
    if (ok && !err)
        return 0;
    unlink(p->tmp);
    return ok ? err_set("%s: cannot write: %s", p->path, strerror(err ? err : EIO)) : -1;
}

void sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!EVP_Digest(data, len, md, &n, EVP_sha256(), NULL))
        n = 0;
    for (unsigned int i = 0; i < n && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[2 * (n < 32 ? n : 32)] = 0;
}

char *read_all(FILE *f, size_t *len, const char *what)
{
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (err_grow(&buf, &cap, n + (1 << 16), 1, what)) {
            free(buf);
            return NULL;
        }
        errno = 0;
        n += got = fread(buf + n, 1, cap - n, f);
    } while (got);
    if (ferror(f)) {
        err_set("cannot read %s: %s", what, strerror(errno ? errno : EIO));
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return err_set("%s: %s", src, strerror(errno));
    part_file out;
    if (part_open(&out, dst)) {
        fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out.f) == n;
    int read_failed = ferror(in);
    fclose(in);
    if (read_failed) {
        part_commit(&out, 0);
        return err_set("%s: read failed", src);
    }
    return part_commit(&out, ok);
}

const char *assets_dir(void)
{
    static char installed[PATH_MAX];
    const char *assets = getenv("KVCHAT_ASSETS");
    if (assets && *assets)
        return assets;
    /* installed (make install): PREFIX/bin/kvchat beside PREFIX/share/kvchat */
    ssize_t n = readlink("/proc/self/exe", installed, sizeof installed - 32);
    char *slash = n > 0 ? memrchr(installed, '/', (size_t)n) : NULL;
    if (slash && slash - installed >= 4 && !memcmp(slash - 4, "/bin", 4)) {
        strcpy(slash - 4, "/share/kvchat/vocab.json");
        if (access(installed, R_OK) == 0) {
            installed[strlen(installed) - strlen("/vocab.json")] = 0;
            return installed;
        }
    }
    return KVCHAT_ASSETS;
}

int copy_asset(const char *name, const char *dst)
{
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/%s", assets_dir(), name);
    return copy_file(src, dst)
               ? err_wrap("the shipped tokenizer (set KVCHAT_ASSETS to the folder holding it)")
               : 0;
}
