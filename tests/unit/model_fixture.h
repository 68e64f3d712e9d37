/* Tiny random checkpoints generated once per test run (in the run's temporary directory). */
#ifndef KVCHAT_MODEL_FIXTURE_H
#define KVCHAT_MODEL_FIXTURE_H

/* DIR of a 2-layer, 4-head, 32-wide checkpoint with context `ctx`, weights in `dtype_name`. */
const char *fixture_model(const char *dtype_name, int ctx);

#endif
