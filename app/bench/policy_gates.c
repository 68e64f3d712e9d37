/* bench --policy's model gates: perplexity --repeat and --recall before any comparison. */
#include "policy_gates.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../files.h"
#include "bench_policy.h"

enum { PASSAGES = 100 }; /* about 20 s on the demo model's shape on two cores */

/* path, or `name` in the folder of `near` where that exists (NULL: nothing to measure) */
static const char *beside(const char *path, const char *near, const char *name, char *buf,
                          size_t size)
{
    if (path || !near)
        return path;
    char *copy = strdup(near);
    if (!copy)
        return NULL;
    snprintf(buf, size, "%s/%s", dirname(copy), name);
    free(copy);
    return access(buf, F_OK) == 0 ? buf : NULL;
}

static int repeat(loaded_model *lm, const char *path, policy_gates *g)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set("the repeat gate's text %s: %s", path, strerror(errno));
    size_t len = 0;
    char *text = read_all(f, &len, path);
    fclose(f);
    int *ids = NULL, n = 0, cap = 0, rc = -1;
    if (text && !tok_encode(lm->tok, text, len, 0, &ids, &n, &cap)) {
        printf("repeat gate's text: %s", path);
        policy_print_file(path);
        rc = copy_repeat(lm, ids, n, PASSAGES, 1, &g->repeat);
        g->repeat_measured = !rc;
    }
    free(text);
    free(ids);
    return rc;
}

static int measure(loaded_model *lm, const char *text, const char *recall, policy_gates *g);

/* in the model's whole window, whatever --ctx gave the bench's (the gates' figures are the
 * model's, as perplexity measures them) */
int policy_gates_run(loaded_model *lm, const char *text, const char *recall, const char *near,
                     policy_gates *g, json_t *doc)
{
    kv_opts o = *kv_pool_opts(lm->pool);
    o.window = lm->model.cfg.n_ctx;
    o.pool_bytes = 0;
    kv_pool *whole = kv_pool_create(lm->backend, &lm->model.cfg, &o, lm->bus), *own = lm->pool;
    if (!whole)
        return err_wrap("the model's gates");
    char tb[4096], rb[4096];
    *g = (policy_gates){0};
    lm->pool = whole;
    int rc = measure(lm, beside(text, near, "heldout-austen.txt", tb, sizeof tb),
                     beside(recall, near, "heldout-recall.jsonl", rb, sizeof rb), g);
    lm->pool = own;
    kv_pool_free(whole);
    if (rc)
        return -1;
    json_t *o2 = json_pack("{s:b}", "holds", g->holds);
    if (g->repeat_measured)
        json_object_set_new(o2, "repeat",
                            json_pack("{s:f, s:[f,f], s:i, s:b}", "drop", g->repeat.drop, "drop_95",
                                      g->repeat.ci[0], g->repeat.ci[1], "passages",
                                      g->repeat.passages, "holds", g->repeat.holds));
    if (g->recall_measured)
        json_object_set_new(o2, "recall",
                            json_pack("{s:f, s:f, s:[f,f], s:i, s:b}", "with_fact", g->recall.with,
                                      "fact_adds", g->recall.drop, "fact_adds_95", g->recall.ci[0],
                                      g->recall.ci[1], "chats", g->recall.passages, "holds",
                                      g->recall.holds));
    json_object_set_new(doc, "model_gates", o2);
    return 0;
}

static int measure(loaded_model *lm, const char *text, const char *recall, policy_gates *g)
{
    int P = lm->model.cfg.n_ctx;
    printf(
        "the model's gates (kvchat perplexity --repeat and --recall; assets/models/README.md):\n");
    if (!text)
        printf("repeat: not measured (no held-out text: --gate-text FILE)\n");
    else if (P < 350)
        printf("repeat: not measured (a passage, 150 tokens and the passage again need 350 "
               "positions; the model has %d)\n",
               P);
    else if (repeat(lm, text, g))
        return -1;
    if (!recall)
        printf("recall: not measured (no recall chats: --gate-recall FILE)\n");
    else if (copy_recall(lm, recall, 1, &g->recall))
        return -1;
    else
        g->recall_measured = 1;
    g->holds = g->repeat_measured && g->recall_measured && g->repeat.holds && g->recall.holds;
    if (!g->holds)
        printf("The model %s: no rule below is ranked (no difference measured).\n",
               policy_gates_verdict(g) + strlen("no difference measured: the model "));
    return 0;
}

const char *policy_rank(const double diff[2], int hold, const char *below, const char *above)
{
    return hold && diff[1] < 0 ? below : hold && diff[0] > 0 ? above : "no difference measured";
}

const char *policy_gates_verdict(const policy_gates *g)
{
    if (g->holds)
        return "";
    if (!g->repeat_measured || !g->recall_measured)
        return "no difference measured: the model was not shown to copy or recall";
    if (!g->repeat.holds && !g->recall.holds)
        return "no difference measured: the model neither copies nor recalls";
    return !g->repeat.holds ? "no difference measured: the model does not copy from far back"
                            : "no difference measured: the model does not recall a fact";
}
