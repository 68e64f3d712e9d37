#include "records.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/err.h"

json_t *rec_sampling(const sampler_params *sp, int n_predict)
{
    return json_pack("{s:f, s:i, s:f, s:f, s:I, s:i}", "temp", (double)sp->temp, "top_k", sp->top_k,
                     "top_p", (double)sp->top_p, "repeat_penalty", (double)sp->repeat_penalty,
                     "seed", (json_int_t)sp->seed, "n_predict", n_predict);
}

void rec_sampling_read(const json_t *block, sampler_params *sp, int *n_predict)
{
    *sp = (sampler_params){(float)json_number_value(json_object_get(block, "temp")),
                           (int)json_integer_value(json_object_get(block, "top_k")),
                           (float)json_number_value(json_object_get(block, "top_p")),
                           (float)json_number_value(json_object_get(block, "repeat_penalty")),
                           (uint64_t)json_integer_value(json_object_get(block, "seed"))};
    if (n_predict)
        *n_predict = (int)json_integer_value(json_object_get(block, "n_predict"));
}

json_t *rec_turn_end_fields(const rec_turn_end *t)
{
    json_t *win = json_array(), *turns = json_array();
    int failed = !win || !turns;
    for (int i = 0; i < t->n_ids && !failed; i++)
        failed = json_array_append_new(win, json_integer(t->ids[i]));
    for (int i = 0; i < t->n_turns && !failed; i++)
        failed = json_array_append_new(turns,
                                       json_pack("[i, i, i, b]", t->turns[i].start, t->turns[i].len,
                                                 t->turns[i].role, t->turns[i].pinned));
    if (failed) {
        json_decref(win);
        json_decref(turns);
        return NULL;
    }
    char rng[24];
    snprintf(rng, sizeof rng, "%016llx", (unsigned long long)t->rng);
    return json_pack("{s:s, s:i, s:b, s:b, s:o, s:o, s:i, s:s, s:o, s:b}", "reply",
                     t->reply ? t->reply : "", "tokens", t->tokens, "cancelled", t->cancelled,
                     "failed", t->failed, "window", win, "turns", turns, "keep", t->keep, "rng",
                     rng, "sampling", rec_sampling(&t->sp, t->n_predict), "approximate",
                     t->approximate);
}

int rec_turn_end_read(const json_t *ev, rec_turn_end *t, int **ids, win_turn **turns)
{
    const json_t *w = json_object_get(ev, "window"), *tu = json_object_get(ev, "turns");
    *t = (rec_turn_end){.reply = json_string_value(json_object_get(ev, "reply")),
                        .tokens = (int)json_integer_value(json_object_get(ev, "tokens")),
                        .cancelled = json_is_true(json_object_get(ev, "cancelled")),
                        .failed = json_is_true(json_object_get(ev, "failed")),
                        .n_ids = (int)json_array_size(w),
                        .n_turns = (int)json_array_size(tu),
                        .keep = (int)json_integer_value(json_object_get(ev, "keep")),
                        .rng = strtoull(json_string_value(json_object_get(ev, "rng")), NULL, 16),
                        .approximate = json_is_true(json_object_get(ev, "approximate"))};
    rec_sampling_read(json_object_get(ev, "sampling"), &t->sp, &t->n_predict);
    *ids = err_malloc(sizeof(int) * (size_t)(t->n_ids + 1), "a resumed window");
    *turns = err_malloc(sizeof **turns * (size_t)(t->n_turns + 1), "a resumed window's turns");
    if (!*ids || !*turns)
        return -1;
    for (int i = 0; i < t->n_ids; i++)
        (*ids)[i] = (int)json_integer_value(json_array_get(w, (size_t)i));
    for (int i = 0; i < t->n_turns; i++) {
        const json_t *x = json_array_get(tu, (size_t)i);
        (*turns)[i] = (win_turn){(int)json_integer_value(json_array_get(x, 0)),
                                 (int)json_integer_value(json_array_get(x, 1)),
                                 (int)json_integer_value(json_array_get(x, 2)),
                                 json_is_true(json_array_get(x, 3))};
    }
    t->ids = *ids;
    t->turns = *turns;
    return 0;
}
