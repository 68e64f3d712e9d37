#include "fingerprint.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../kernels/err.h"
#include "../../model/checkpoint.h"
#include "../files.h"

/* FNV-1a, 64-bit */
uint64_t fp_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (!h)
        h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int hash_file(uint64_t *h, const char *path, int sampled)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set("%s: %s", path, strerror(errno));
    struct stat sb;
    fstat(fileno(f), &sb);
    uint64_t size = (uint64_t)sb.st_size;
    *h = fp_hash(*h, &size, sizeof size);
    char buf[4096];
    size_t n;
    if (!sampled) {
        while ((n = fread(buf, 1, sizeof buf, f)) > 0)
            *h = fp_hash(*h, buf, n);
    } else {
        for (int k = 0; k <= 64; k++) { /* the header is in the first chunk */
            if (fseeko(f, (off_t)(size / 64 * (uint64_t)k), SEEK_SET))
                break;
            n = fread(buf, 1, sizeof buf, f);
            *h = fp_hash(*h, buf, n);
        }
    }
    int bad = ferror(f);
    fclose(f);
    return bad ? err_set("%s: read error", path) : 0;
}

static int files(const char *dir, const char *a, int sa, const char *b, int sb, char out[17])
{
    char path[PATH_MAX];
    uint64_t h = 0;
    snprintf(path, sizeof path, "%s/%s", dir, a);
    if (hash_file(&h, path, sa))
        return -1;
    snprintf(path, sizeof path, "%s/%s", dir, b);
    if (hash_file(&h, path, sb))
        return -1;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return 0;
}

int fp_model(const char *dir, char out[17])
{
    /* the weights as they came: a .bin keeps naming them after convert writes model.safetensors
     * beside it, so sessions recorded before the conversion still resume */
    char bin[PATH_MAX];
    snprintf(bin, sizeof bin, "%s/pytorch_model.bin", dir);
    const char *weights = file_size(bin) > 0 ? "pytorch_model.bin" : ckpt_file(dir);
    return weights ? files(dir, "config.json", 0, weights, 1, out) : -1;
}

int fp_tokenizer(const char *dir, char out[17])
{
    return files(dir, "vocab.json", 0, "merges.txt", 0, out);
}
