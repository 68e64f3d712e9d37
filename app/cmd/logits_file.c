/* The base run's file: LOGITS_HEAD, vocab and count (int32 each), then per token its id and its
 * top id (int32: top-1 agreement exactly), its loss (float32: the base's PPL exactly) and the V
 * log-probabilities (f16). */
#include "logits_file.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../kernels/dtype.h"
#include "../../kernels/err.h"
#include "../files.h"

const char LOGITS_HEAD[8] = "KVPPLv1", JSON_HEAD[] = "{\n \"tokens\": [";

int base_open(base_run *b, const char *path, int V)
{
    char magic[8];
    int32_t head[2];
    memset(b, 0, sizeof *b);
    if (!(b->f = fopen(path, "rb")))
        return err_set("%s: %s", path, strerror(errno));
    if (fread(magic, 1, 8, b->f) != 8 || memcmp(magic, LOGITS_HEAD, 8) ||
        fread(head, 4, 2, b->f) != 2)
        return err_set("%s: not a kvchat perplexity --save-logits file", path);
    if (head[0] != V)
        return err_set("%s: a base run of another vocabulary (%d, this model's %d)", path, head[0],
                       V);
    if (head[1] < 0)
        return err_set("%s: a base run of %d tokens (a damaged file)", path, head[1]);
    long long want = 16 + (long long)head[1] * (12 + 2ll * head[0]);
    if (fseek(b->f, 0, SEEK_END) || ftell(b->f) != want || fseek(b->f, 16, SEEK_SET))
        return err_set("%s: a base run of %d tokens should take %lld bytes (cut short or damaged)",
                       path, head[1], want);
    b->V = V;
    b->count = head[1];
    if (!(b->row = err_malloc(sizeof *b->row * (size_t)V, "a base run's row")))
        return -1;
    return 0;
}

int base_next(base_run *b, int id, float *lp, double *lse, int32_t *top, float *nll,
              const char *path)
{
    int32_t got;
    if (b->read >= b->count || fread(&got, 4, 1, b->f) != 1 || fread(top, 4, 1, b->f) != 1 ||
        fread(nll, 4, 1, b->f) != 1 || fread(b->row, 2, (size_t)b->V, b->f) != (size_t)b->V)
        return err_set("%s: the base run scored %ld tokens, this one more (another text, --ctx, "
                       "--stride or --tokens?)",
                       path, b->count);
    if (got != id)
        return err_set("%s: token %ld differs (base %d, this run %d): another text, --ctx or "
                       "--stride?",
                       path, b->read, got, id);
    double mx = -INFINITY, sum = 0;
    int finite = isfinite(*nll) && *top >= 0 && *top < b->V;
    for (int v = 0; v < b->V; v++) {
        lp[v] = dt_f16_to_f32(b->row[v]);
        finite &= isfinite(lp[v]);
        mx = lp[v] > mx ? lp[v] : mx;
    }
    if (!finite)
        return err_set("%s: token %ld (id %d) holds a number that is not finite or a top id out "
                       "of the vocabulary (a damaged base run)",
                       path, b->read, id);
    b->read++;
    for (int v = 0; v < b->V; v++)
        sum += exp(lp[v] - mx);
    *lse = mx + log(sum);
    return 0;
}

void base_close(base_run *b)
{
    if (b->f)
        fclose(b->f);
    free(b->row);
    memset(b, 0, sizeof *b);
}

int save_head(FILE *f, int V, long count)
{
    int32_t head[2] = {V, (int32_t)count};
    return fwrite(LOGITS_HEAD, 1, 8, f) == 8 && fwrite(head, 4, 2, f) == 2 ? 0 : -1;
}

int save_row(FILE *f, int id, int top, const float *lp, int V, uint16_t *row)
{
    int32_t i[2] = {id, top};
    float nll = -lp[id];
    for (int v = 0; v < V; v++)
        row[v] = dt_f32_to_f16(lp[v] < -65000 ? -65000 : lp[v]);
    return fwrite(i, 4, 2, f) == 2 && fwrite(&nll, 4, 1, f) == 1 &&
                   fwrite(row, 2, (size_t)V, f) == (size_t)V
               ? 0
               : -1;
}

int output_claim(const char *path, const char *opt, const char *head, const char *const *inputs,
                 int force)
{
    for (int i = 0; inputs[i]; i++)
        if (same_file(path, inputs[i]))
            return err_set("%s %s: a file this run reads (the text, the base run or the "
                           "model's): choose another name",
                           opt, path);
    struct stat sb;
    if (lstat(path, &sb) || !S_ISREG(sb.st_mode) || !sb.st_size || force)
        return 0; /* nothing there, a device or a FIFO (written into), or --force */
    char first[16] = {0};
    size_t n = strlen(head) < sizeof first ? strlen(head) : sizeof first;
    FILE *f = fopen(path, "rb");
    int same = f && fread(first, 1, n, f) == n && !memcmp(first, head, n);
    if (f)
        fclose(f);
    return same ? 0
                : err_set("%s %s exists and is not an earlier %s output: remove it, choose "
                          "another name or give --force",
                          opt, path, opt);
}
