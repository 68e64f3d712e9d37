/* bench --policy --control: the track twice, on the model and on random weights of its shape. */
#include "policy_control.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/err.h"
#include "../cmd/commands.h"
#include "../selftest.h"
#include "bench.h"

enum { CONTROL_SEED = 1 };

int policy_track_run(loaded_model *lm, const model_opts *mo, const policy_track *t,
                     const char *json)
{
    return t->text ? bench_text(lm, t->text, t->gate_recall, t->docs, json, mo->sp.seed)
                   : bench_policy(lm, mo, t->messages, t->chats, t->recall, t->gate_text,
                                  t->gate_recall, json);
}

/* "12.3456 [1.2, 3.4]"-style cells of a figure {key, key_ci} in obj (sign: "+" for a difference;
 * missing: "-") */
static void cell(char *out, size_t size, json_t *obj, const char *key, const char *ci_key,
                 double scale, int digits, const char *sign)
{
    json_t *f = json_object_get(obj, key), *c = json_object_get(obj, ci_key);
    if (!json_is_number(f) || !json_is_number(json_array_get(c, 0))) {
        snprintf(out, size, "-");
        return;
    }
    char fmt[64];
    snprintf(fmt, sizeof fmt, "%%%s.*f [%%%s.*f, %%%s.*f]", sign, sign, sign);
    snprintf(out, size, fmt, digits, scale * json_number_value(f), digits,
             scale * json_number_value(json_array_get(c, 0)), digits,
             scale * json_number_value(json_array_get(c, 1)));
}

/* the control's row of the same rule in the same window or budget */
static json_t *match(json_t *rules, json_t *row, const char *grain)
{
    size_t i;
    json_t *r;
    json_array_foreach(rules, i, r)
    {
        if (json_equal(json_object_get(r, "rule"), json_object_get(row, "rule")) &&
            json_equal(json_object_get(r, grain), json_object_get(row, grain)))
            return r;
    }
    return NULL;
}

static const char *verdict_of(json_t *row)
{
    const char *v = row ? json_string_value(json_object_get(row, "verdict")) : NULL;
    return v ? v : "-";
}

/* one table per window (budget): each rule's mean KL and its difference from the default's on the
 * model and on the control, with their verdicts (recall: its fill tokens right, their difference,
 * and the chats whose fact's turn it evicted) */
static void side_by_side(json_t *a, json_t *b, int recall)
{
    json_t *ra = json_object_get(a, "rules"), *rb = json_object_get(b, "rules");
    const char *grain = json_object_get(json_array_get(ra, 0), "budget") ? "budget" : "window";
    json_int_t at = -1;
    size_t i;
    json_t *row;
    json_array_foreach(ra, i, row)
    {
        json_int_t g = json_integer_value(json_object_get(row, grain));
        if (g != at) {
            at = g;
            printf("\nthe model and its control (random weights, the same shape), %s %lld: mean "
                   "KL [95%%], its difference from the default's [95%%], verdict%s\n",
                   grain, (long long)g,
                   recall ? "; fill top-1 % [95%], its difference, facts evicted" : "");
            printf("%-13s | %-25s %-27s %-25s| %-25s %-27s %s\n", "rule", "the model", "", "",
                   "the control", "", "");
        }
        json_t *c = match(rb, row, grain);
        char k[2][64], d[2][64];
        for (int m = 0; m < 2; m++) {
            json_t *r = m ? c : row;
            cell(k[m], sizeof k[m], json_object_get(r, "figures"), "kl_mean", "kl_mean_ci", 1, 4,
                 "");
            cell(d[m], sizeof d[m], json_object_get(r, "kl_vs_default"), "diff", "diff_95", 1, 4,
                 "+");
        }
        printf("%-13s | %-25s %-27s %-25s| %-25s %-27s %s\n",
               json_string_value(json_object_get(row, "rule")), k[0], d[0], verdict_of(row), k[1],
               d[1], verdict_of(c));
        for (int m = 0; recall && m < 2; m++) {
            json_t *q = json_object_get(m ? c : row, "recall");
            if (!q)
                continue;
            char f[64], fd[64];
            cell(f, sizeof f, q, "fill_top1", "fill_top1_95", 100, 1, "");
            cell(fd, sizeof fd, json_object_get(q, "vs_default"), "diff", "diff_95", 100, 1, "+");
            printf("%-13s   %s fill top-1 %s, %s, facts evicted %lld of %lld: %s\n", "",
                   m ? "control:" : "model:  ", f, fd,
                   (long long)json_integer_value(json_object_get(q, "fact_evicted")),
                   (long long)json_integer_value(json_object_get(q, "asked")), verdict_of(q));
        }
    }
}

int policy_with_control(loaded_model *lm, const model_opts *mo, const policy_track *t,
                        const char *json)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096], model[4200], ja[4200], jb[4200];
    snprintf(dir, sizeof dir, "%s/kvchat-control-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return err_set("bench --control: cannot make a folder in %s", tmp ? tmp : "/tmp");
    snprintf(model, sizeof model, "%s/model", dir);
    snprintf(ja, sizeof ja, "%s/model.json", dir);
    snprintf(jb, sizeof jb, "%s/control.json", dir);
    gpt2_config c = lm->model.cfg;
    c.random_weights = 1;
    model_opts co = *mo;
    co.model_dir = model;
    loaded_model control = {0};
    int loaded = 0, rc = policy_track_run(lm, mo, t, ja);
    if (!rc) {
        printf("\nthe control: random weights of the model's shape (kvchat make-tiny-model "
               "--layers %d --heads %d --embd %d --ctx %d --seed %d)\n\n",
               c.n_layer, c.n_head, c.n_embd, c.n_ctx, CONTROL_SEED);
        fflush(stdout);
        rc = tiny_model_write(model, &c, DT_F32, CONTROL_SEED) || selftest_load(&control, &co);
        loaded = !rc;
    }
    if (!rc)
        rc = policy_track_run(&control, &co, t, jb);
    json_error_t je;
    json_t *a = rc ? NULL : json_load_file(ja, 0, &je), *b = rc ? NULL : json_load_file(jb, 0, &je);
    if (!rc && (!a || !b))
        rc = err_set("bench --control: cannot read back its figures: %s", je.text);
    if (!rc)
        side_by_side(a, b, t->recall != NULL);
    if (!rc && json) {
        json_t *doc = json_pack("{s:O, s:O}", "model", a, "control", b);
        rc = json_dump_file(doc, json, JSON_COMPACT) ? err_set("--json %s: cannot write", json) : 0;
        json_decref(doc);
    }
    json_decref(a);
    json_decref(b);
    if (loaded)
        unload_model(&control);
    static const char *const files[] = {"model/config.json",
                                        "model/vocab.json",
                                        "model/merges.txt",
                                        "model/model.safetensors",
                                        "model.json",
                                        "control.json",
                                        "model"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
    return rc;
}
