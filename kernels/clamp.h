/* A value bounded to a range: one call where clamps were nested ternaries. */
#ifndef KVCHAT_CLAMP_H
#define KVCHAT_CLAMP_H

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
/* NaN goes to lo */
static inline double clamp_dbl(double v, double lo, double hi)
{
    return v >= lo ? v <= hi ? v : hi : lo;
}
static inline long long clamp_ll(long long v, long long lo, long long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

#endif
