#include "sampler.h"

sampler_params sampler_defaults(void)
{
    return (sampler_params){
        .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .repeat_penalty = 1.1f, .seed = 0};
}

int sampler_params_equal(const sampler_params *a, const sampler_params *b)
{
    return a->temp == b->temp && a->top_k == b->top_k && a->top_p == b->top_p &&
           a->repeat_penalty == b->repeat_penalty && a->seed == b->seed;
}

void sampler_init(sampler *s, const sampler_params *p)
{
    s->p = *p;
    s->rng = p->seed ^ 0x9e3779b97f4a7c15ull;
}

/* splitmix64: tiny, seedable, and the same stream on every platform */
static double next_uniform(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

kb_sample sampler_draw(sampler *s, const int *history, int n_history)
{
    const sampler_params *p = &s->p;
    return (kb_sample){.temp = p->temp,
                       .top_p = p->top_p,
                       .repeat_penalty = p->repeat_penalty,
                       .top_k = p->top_k,
                       .u = p->temp > 0 ? next_uniform(&s->rng) : 0,
                       .history = history,
                       .n_history = n_history};
}
