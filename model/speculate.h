/* Speculative decoding: a drafter (draft.h) proposes k tokens, the model runs the pending token and
 * all k in one pass (gpt2_verify), and keeps the longest prefix it agrees with plus one token of
 * its own, so a pass yields 1..k+1 tokens. Greedy: a draft is kept when it is the model's own
 * choice (the penalised argmax of its logits), so the reply is the one plain decoding gives.
 * Sampling: the rejection rule (Leviathan et al. 2023, Chen et al. 2023) over the distributions
 * after every transform (the repeat penalty, temperature, top-k and top-p, kernels/cpu/sample.c):
 * a draft d is kept with probability min(1, p(d) / q(d)); at the first one rejected the token is
 * drawn from max(0, p - q), normalised; with all kept, one more from p. The tokens then follow the
 * model's own distribution exactly. The draws come from the conversation's sampler stream. */
#ifndef KVCHAT_SPECULATE_H
#define KVCHAT_SPECULATE_H

#include "draft.h"

typedef struct {
    long rounds;   /* verify passes */
    long drafted;  /* tokens proposed */
    long accepted; /* of them kept */
    long tested;   /* of them judged (accepted, and the first rejected of a round) */
    long made;     /* tokens the rounds gave (accepted + one of the model's each) */
    double draft_s, verify_s;
} spec_stats;

typedef struct spec spec;

/* speculation for m on b with drafter d (which stays the caller's) */
spec *spec_new(gpt2_model *m, kb_backend *b, drafter *d);
void spec_free(spec *s);
const spec_stats *spec_get_stats(const spec *s);

/* One round. ids[0..n): the context, whose last id is chosen and not yet through the model (the
 * cache holds n - 1 positions). Writes to out the drafts kept and then the model's next token, at
 * most max_out (>= 1) of them, *n_out. The cache then holds ids[0..n), the drafts kept, and
 * *rejected positions more (the drafts not kept), which the caller truncates (kv_truncate, and the
 * event that says so where there are events); the last token of out is pending, as ids[n - 1]
 * was. The drafter's own cache is already back to what was kept. */
int spec_round(spec *s, kv_seq *cache, const int *ids, int n, sampler *smp, int max_out, int *out,
               int *n_out, int *rejected);

/* Decoding token by token as a plain step does, with rounds underneath: ids[0..n) the context, its
 * last id appended last; *next gets the token that follows it. A round runs when the last round's
 * tokens are all taken (ids[n - 1] is then pending, as for a plain step, and the round gives at
 * most max_out); until then each call hands out the next of them, its predecessor already in the
 * cache. The positions a round rejected are truncated here (rejected NULL), or counted into
 * *rejected (0 when no round ran) for the caller to truncate and report. */
int spec_next(spec *s, kv_seq *cache, const int *ids, int n, sampler *smp, int max_out, int *next,
              int *rejected);
/* the last round's tokens not yet handed out: while there are, the cache runs ahead of the
 * context by them (all of them but the last) */
int spec_queued(const spec *s);
/* forgets them (a reply that stops inside a round; the caller cuts the cache back) */
void spec_drop(spec *s);
/* drafts with d from the next round on (a conversation's own drafter; the same kind as spec_new's)
 */
void spec_use(spec *s, drafter *d);

#endif
