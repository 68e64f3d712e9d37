#include "files.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../kernels/err.h"

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

int copy_file(const char *src, const char *dst)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.part", dst);
    FILE *in = fopen(src, "rb");
    if (!in)
        return err_set("%s: %s", src, strerror(errno));
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return err_set("%s: %s", tmp, strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n)
            rc = err_set("%s: write failed: %s", tmp, strerror(errno));
    if (!rc && ferror(in))
        rc = err_set("%s: read failed", src);
    fclose(in);
    if (fclose(out) && !rc)
        rc = err_set("%s: write failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, dst))
        rc = err_set("%s: %s", dst, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}
