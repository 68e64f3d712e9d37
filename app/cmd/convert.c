/* kvchat convert: a pytorch_model.bin rewritten as model.safetensors beside it, so later loads map
 * the weights in place instead of unpacking them. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../../model/pytorch.h"
#include "../../model/safetensors.h"
#include "commands.h"
#include "../files.h"
#include "../options.h"

const char CONVERT_HELP[] =
    "usage: kvchat convert DIR [--force]\n"
    "\n"
    "Writes DIR/model.safetensors from DIR/pytorch_model.bin, which is read without running "
    "pickle\n"
    "(only tensors, storages and OrderedDict may be named in it). Tensors keep their names, shapes "
    "and\n"
    "dtypes. An lm_head.weight that holds the token embedding's values is left out, as Hugging "
    "Face\n"
    "leaves out tied weights: GPT-2 ties its head to wte. The file is written to\n"
    "model.safetensors.part and renamed when complete; an existing model.safetensors is kept "
    "unless\n"
    "--force. Loading a pytorch_model.bin without converting works too, only slower.\n";

typedef struct {
    const st_file *pt;
    const int *from; /* entry i is tensor from[i] */
    int n;
    size_t total, done;
} job;

static int fill(int i, void *buf, void *ctx)
{
    job *j = ctx;
    const st_tensor *t = &j->pt->tensors[j->from[i]];
    memcpy(buf, t->data, t->end - t->begin);
    j->done += t->end - t->begin;
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\rwriting model.safetensors: %3d%%%s",
                (int)(100.0 * j->done / (j->total ? j->total : 1)), i == j->n - 1 ? "\n" : "");
    return 0;
}

/* the part being written, removed when a signal ends convert: it may be gigabytes */
static const char *volatile killed_part;
static const int KILLERS[3] = {SIGINT, SIGTERM, SIGHUP};

static void on_kill(int sig)
{
    if (killed_part)
        unlink(killed_part);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int same_values(const st_tensor *a, const st_tensor *b)
{
    return a && b && !strcmp(a->dtype, b->dtype) && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, sizeof a->shape) && a->end - a->begin == b->end - b->begin &&
           !memcmp(a->data, b->data, a->end - a->begin);
}

int cmd_convert(int argc, char **argv)
{
    const char *dir = NULL;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--force"))
            force = 1;
        else if (argv[i][0] == '-')
            return err_set("unknown option '%s' (see kvchat convert --help)", argv[i]), EXIT_USAGE;
        else if (dir)
            return err_set("one directory at a time (got '%s' and '%s')", dir, argv[i]), EXIT_USAGE;
        else
            dir = argv[i];
    }
    if (!dir)
        return err_set("which directory? kvchat convert DIR (it must hold pytorch_model.bin)"),
               EXIT_USAGE;
    char src[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "%s/pytorch_model.bin", dir);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    if (file_size(src) < 0)
        return err_set("%s: no such file (convert reads a PyTorch checkpoint)", src), EXIT_RUNTIME;
    if (file_size(dst) >= 0 && !force)
        return err_set("%s already exists (kvchat loads it before pytorch_model.bin; --force "
                       "replaces it)",
                       dst),
               EXIT_RUNTIME;
    st_file pt;
    if (pt_open(&pt, src))
        return EXIT_RUNTIME;
    const st_tensor *wte = st_find(&pt, "transformer.wte.weight");
    if (!wte)
        wte = st_find(&pt, "wte.weight");
    const st_tensor *head = st_find(&pt, "lm_head.weight");
    int tied = same_values(head, wte), rc = EXIT_RUNTIME;
    st_entry *e = err_calloc((size_t)pt.n_tensors + 1, sizeof *e, "the tensor list");
    int *from = err_calloc((size_t)pt.n_tensors + 1, sizeof *from, "the tensor list");
    job j = {.pt = &pt, .from = from};
    for (int i = 0; e && from && i < pt.n_tensors; i++) {
        const st_tensor *t = &pt.tensors[i];
        if (tied && t == head)
            continue;
        e[j.n] = (st_entry){
            .name = t->name, .dtype = t->dtype, .ndim = t->ndim, .bytes = t->end - t->begin};
        memcpy(e[j.n].shape, t->shape, sizeof t->shape);
        from[j.n++] = i;
        j.total += t->end - t->begin;
    }
    /* written whole to model.safetensors.part, then read back as a load would, and only then put in
     * place: convert never leaves a directory worse than it found it, killed or not */
    part_file out;
    if (e && from && !part_open(&out, dst)) {
        killed_part = out.tmp;
        void (*was[3])(int);
        for (int s = 0; s < 3; s++)
            was[s] = signal(KILLERS[s], on_kill);
        int ok = !st_write(out.f, out.tmp, e, j.n, fill, &j) && !fflush(out.f);
        st_file back;
        if (ok && st_open(&back, out.tmp)) {
            ok = 0;
            err_wrap("%s: the file written does not read back", out.tmp);
        } else if (ok) {
            int got = back.n_tensors;
            st_close(&back);
            if (got != j.n)
                ok = 0, err_set("%s: the file written holds %d tensors, not %d", out.tmp, got, j.n);
        }
        rc = part_commit(&out, ok) || !ok ? EXIT_RUNTIME : 0;
        for (int s = 0; s < 3; s++)
            signal(KILLERS[s], was[s]);
        killed_part = NULL;
    }
    if (!rc)
        printf("%s: %d tensors, %.1f MiB%s\n", dst, j.n, j.total / 1048576.0,
               tied ? " (lm_head.weight left out: it holds wte's values)" : "");
    free(e);
    free(from);
    st_close(&pt);
    return rc;
}
