#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/err.h"

static int get_int(json_t *root, const char *key, const char *alt, int *out, int required)
{
    json_t *v = json_object_get(root, key);
    if (!v && alt)
        v = json_object_get(root, alt);
    if (!v) {
        if (required)
            return err_set("missing '%s'", key);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 30)
        return err_set("'%s' must be a non-negative integer below 2^30", key);
    *out = (int)json_integer_value(v);
    return 0;
}

int cfg_load(gpt2_config *c, const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return je.line < 0 ? err_set("%s", je.text) /* it names the file: cannot open it */
                           : err_set("%s: %s (line %d)", path, je.text, je.line);
    int rc = -1;
    memset(c, 0, sizeof *c);
    c->ln_eps = 1e-5f;
    c->eos_id = 50256;
    if (!json_is_object(root)) {
        err_set("%s: not a JSON object", path);
        goto out;
    }
    json_t *mt = json_object_get(root, "model_type");
    if (mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "gpt2"))) {
        err_set("%s: model_type is not \"gpt2\"; kvchat runs GPT-2 architecture models only", path);
        goto out;
    }
    json_t *act = json_object_get(root, "activation_function");
    if (act && (!json_is_string(act) || (strcmp(json_string_value(act), "gelu_new") &&
                                         strcmp(json_string_value(act), "gelu_pytorch_tanh")))) {
        err_set("%s: activation_function must be \"gelu_new\" (the tanh GELU GPT-2 uses)", path);
        goto out;
    }
    if (get_int(root, "n_layer", NULL, &c->n_layer, 1) ||
        get_int(root, "n_head", NULL, &c->n_head, 1) ||
        get_int(root, "n_embd", NULL, &c->n_embd, 1) ||
        get_int(root, "n_positions", "n_ctx", &c->n_ctx, 1) ||
        get_int(root, "vocab_size", NULL, &c->vocab_size, 1) ||
        get_int(root, "eos_token_id", NULL, &c->eos_id, 0)) {
        err_wrap("%s", path);
        goto out;
    }
    c->random_weights = json_is_true(json_object_get(root, "kvchat_random_weights"));
    c->conversational =
        json_object_get(json_object_get(root, "task_specific_params"), "conversational") != NULL;
    json_t *about = json_object_get(root, "kvchat_about");
    if (json_is_string(about))
        snprintf(c->about, sizeof c->about, "%s", json_string_value(about));
    json_t *name = json_object_get(root, "_name_or_path");
    if (json_is_string(name))
        snprintf(c->name, sizeof c->name, "%s", json_string_value(name));
    json_t *eps = json_object_get(root, "layer_norm_epsilon");
    if (eps) {
        if (!json_is_number(eps) || json_number_value(eps) <= 0 || json_number_value(eps) > 1) {
            err_set("%s: layer_norm_epsilon must be a number in (0, 1]", path);
            goto out;
        }
        c->ln_eps = (float)json_number_value(eps);
    }
    if (cfg_validate(c)) {
        err_wrap("%s", path);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int cfg_validate(const gpt2_config *c)
{
    if (c->n_layer < 1 || c->n_layer > 1024)
        return err_set("n_layer %d is not in 1..1024", c->n_layer);
    if (c->n_head < 1 || c->n_embd < 1 || c->n_embd % c->n_head)
        return err_set("n_embd %d is not a positive multiple of n_head %d", c->n_embd, c->n_head);
    if (c->n_embd > 65536)
        return err_set("n_embd %d is larger than 65536", c->n_embd);
    if (c->n_ctx < 1 || c->n_ctx > 65536)
        return err_set("n_positions %d is not in 1..65536", c->n_ctx);
    if (c->vocab_size < 257 || c->vocab_size > (1 << 24))
        return err_set("vocab_size %d is not in 257..16777216", c->vocab_size);
    if (c->eos_id >= c->vocab_size)
        return err_set("eos_token_id %d is outside the vocabulary (%d)", c->eos_id, c->vocab_size);
    return 0;
}

int cfg_save(const gpt2_config *c, const char *path)
{
    json_t *root =
        json_pack("{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:i}", "architectures",
                  "GPT2LMHeadModel", "model_type", "gpt2", "activation_function", "gelu_new",
                  "n_layer", c->n_layer, "n_head", c->n_head, "n_embd", c->n_embd, "n_positions",
                  c->n_ctx, "n_ctx", c->n_ctx, "vocab_size", c->vocab_size, "layer_norm_epsilon",
                  (double)c->ln_eps, "bos_token_id", c->eos_id, "eos_token_id", c->eos_id);
    if (!root)
        return err_set("%s: cannot build config JSON", path);
    if (c->random_weights)
        json_object_set_new(root, "kvchat_random_weights", json_true());
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return rc ? err_set("%s: cannot write", path) : 0;
}
