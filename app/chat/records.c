#include "records.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/err.h"
#include "../../model/events.h"

ev_sampling rec_sampling(const sampler_params *sp, int n_predict)
{
    return (ev_sampling){.temp = sp->temp,
                         .top_k = sp->top_k,
                         .top_p = sp->top_p,
                         .repeat_penalty = sp->repeat_penalty,
                         .seed = (long long)sp->seed,
                         EV_OPT(n_predict, n_predict)};
}

void rec_sampling_read(const json_t *block, sampler_params *sp, int *n_predict)
{
    *sp = (sampler_params){
        (float)ev_sampling_temp(block), ev_sampling_top_k(block), (float)ev_sampling_top_p(block),
        (float)ev_sampling_repeat_penalty(block), (uint64_t)ev_sampling_seed(block)};
    if (n_predict)
        *n_predict = ev_sampling_n_predict(block);
}

void rec_turn_end_emit(ev_bus *bus, int conv, const rec_turn_end *t)
{
    int n = t->n_turns;
    double *reads = err_malloc(sizeof(double) * (size_t)(n + 1), "a turn's record");
    int *numbers = reads ? err_malloc(sizeof(int) * (size_t)(n + 1), "a turn's record") : NULL;
    for (int i = 0; numbers && i < n; i++) { /* reads within 0..1, as the schema has them */
        float r = t->turns[i].read;
        reads[i] = r < 0 ? 0 : r > 1 ? 1 : r;
        numbers[i] = t->turns[i].no;
    }
    char rng[24];
    snprintf(rng, sizeof rng, "%016llx", (unsigned long long)t->rng);
    if (numbers) /* else the record is lost as any event is when memory runs out */
        ev_emit_turn_end(bus, conv,
                         &(ev_turn_end){.reply = t->reply,
                                        .tokens = t->tokens,
                                        EV_OPT(cancelled, t->cancelled),
                                        EV_OPT(failed, t->failed),
                                        .window = t->ids,
                                        .n_window = t->n_ids,
                                        .turns = t->turns,
                                        .n_turns = n,
                                        .keep = t->keep,
                                        .rng = rng,
                                        .sampling = rec_sampling(&t->sp, t->n_predict),
                                        EV_OPT(approximate, t->approximate),
                                        .reads = reads,
                                        .n_reads = n,
                                        .has_reads = t->reads,
                                        .numbers = numbers,
                                        .n_numbers = n,
                                        .has_numbers = 1});
    free(reads);
    free(numbers);
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
