#include "records.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/err.h"
#include "../../model/events.h"

json_t *rec_sampling(const sampler_params *sp, int n_predict)
{
    return json_pack("{s:f, s:i, s:f, s:f, s:I, s:i}", "temp", (double)sp->temp, "top_k", sp->top_k,
                     "top_p", (double)sp->top_p, "repeat_penalty", (double)sp->repeat_penalty,
                     "seed", (json_int_t)sp->seed, "n_predict", n_predict);
}

void rec_sampling_read(const json_t *block, sampler_params *sp, int *n_predict)
{
    *sp = (sampler_params){
        (float)ev_sampling_temp(block), ev_sampling_top_k(block), (float)ev_sampling_top_p(block),
        (float)ev_sampling_repeat_penalty(block), (uint64_t)ev_sampling_seed(block)};
    if (n_predict)
        *n_predict = ev_sampling_n_predict(block);
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
    json_t *ev =
        json_pack("{s:s, s:i, s:b, s:b, s:o, s:o, s:i, s:s, s:o, s:b}", "reply",
                  t->reply ? t->reply : "", "tokens", t->tokens, "cancelled", t->cancelled,
                  "failed", t->failed, "window", win, "turns", turns, "keep", t->keep, "rng", rng,
                  "sampling", rec_sampling(&t->sp, t->n_predict), "approximate", t->approximate);
    json_t *reads = ev && t->reads ? json_array() : NULL;
    for (int i = 0; reads && i < t->n_turns; i++) /* within 0..1 as the schema has it */
        json_array_append_new(reads, json_real(t->turns[i].read < 0   ? 0
                                               : t->turns[i].read > 1 ? 1
                                                                      : t->turns[i].read));
    if (reads)
        json_object_set_new(ev, "reads", reads);
    json_t *numbers = ev ? json_array() : NULL;
    for (int i = 0; numbers && i < t->n_turns; i++)
        json_array_append_new(numbers, json_integer(t->turns[i].no));
    if (numbers)
        json_object_set_new(ev, "numbers", numbers);
    return ev;
}

int rec_turn_end_read(const json_t *ev, rec_turn_end *t, int **ids, win_turn **turns)
{
    const json_t *w = ev_turn_end_window(ev), *tu = ev_turn_end_turns(ev),
                 *nos = ev_turn_end_numbers(ev);
    *t = (rec_turn_end){.reply = ev_turn_end_reply(ev),
                        .tokens = ev_turn_end_tokens(ev),
                        .cancelled = ev_turn_end_cancelled(ev),
                        .failed = ev_turn_end_failed(ev),
                        .n_ids = (int)json_array_size(w),
                        .n_turns = (int)json_array_size(tu),
                        .keep = ev_turn_end_keep(ev),
                        .rng = strtoull(ev_turn_end_rng(ev), NULL, 16),
                        .approximate = ev_turn_end_approximate(ev)};
    rec_sampling_read(ev_turn_end_sampling(ev), &t->sp, &t->n_predict);
    *ids = err_malloc(sizeof(int) * (size_t)(t->n_ids + 1), "a resumed window");
    *turns = err_malloc(sizeof **turns * (size_t)(t->n_turns + 1), "a resumed window's turns");
    if (!*ids || !*turns)
        return -1;
    for (int i = 0; i < t->n_ids; i++)
        (*ids)[i] = (int)json_integer_value(json_array_get(w, (size_t)i));
    for (int i = 0; i < t->n_turns; i++) {
        const json_t *x = json_array_get(tu, (size_t)i);
        (*turns)[i] = (win_turn){
            .start = (int)json_integer_value(json_array_get(x, 0)),
            .len = (int)json_integer_value(json_array_get(x, 1)),
            .role = (int)json_integer_value(json_array_get(x, 2)),
            .pinned = json_is_true(json_array_get(x, 3)),
            .read = (float)json_number_value(json_array_get(ev_turn_end_reads(ev), (size_t)i)),
            /* sessions from before turns were numbered: by their place in the window */
            .no = nos ? (int)json_integer_value(json_array_get(nos, (size_t)i)) : i + 1};
    }
    t->ids = *ids;
    t->turns = *turns;
    return 0;
}
