/* Every event and its fields, declared once. The kinds (EVK_PREFILL, ...), a struct per event and
 * its typed emitter (ev_prefill, ev_emit_prefill in events.h), the session reader's checks
 * (ev_check), the check of each emitted event in the tests (KVCHAT_CHECK_EVENTS), the typed
 * accessors the panel and replay read with (ev_prefill_cached(ev), ...) and the events table of
 * model/README.md (`kvchat replay --events-table`) are all made from this list.
 *
 * E(NAME, name, doc): an event. F(event, field, type, lo, hi, need, doc): one of its fields, where
 * type is INT (an int in lo..hi), I64 (any integer: bytes, seeds), NUM (a finite number in lo..hi,
 * compared as the float it was written from), STR, BOOL, IDS (token ids: at most W integers in
 * 0..V-1), INTS (at most W + 1 integers in lo..hi), NUMS (at most W + 1 numbers in lo..hi), SPANS
 * ([start, length] pairs within W), TURNS
 * ([start, length, role, pinned] within the event's window), SAMPLING (an object of the sampling
 * fields below), CACHE (one of the cache totals below), CACHESET or CHATSET (the cache's or the
 * chat's settings below) or OBJ (an object); need is REQ or OPT
 * (absent, or as declared). Bounds may use W, the session's window, V, its vocabulary, and
 * EV_CONV_MAX. Every event also has "ev", "conv" (0..EV_CONV_MAX) and "t" (seconds, >= 0). */
#ifndef KVCHAT_EVENT_SCHEMA_H
#define KVCHAT_EVENT_SCHEMA_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "window.h"

#define EV_CONV_MAX (1 << 20)
#define EV_BIG 2147483647     /* a count with no bound of its own */
#define EV_TURN_MAX (1 << 30) /* a turn's number in its conversation: the next one still fits */
#define EV_INF 1e30

/* the sampling block: a set event's fields, a turn_end's "sampling", the session header's */
#define EV_SAMPLING_FIELDS(F, e)                                         \
    F(e, temp, NUM, 0, 100, REQ, "temperature (0: greedy)")              \
    F(e, top_k, INT, 0, 1 << 24, REQ, "top-k (0: off)")                  \
    F(e, top_p, NUM, 0, 1, REQ, "top-p (1: off)")                        \
    F(e, repeat_penalty, NUM, 0.01, 100, REQ, "repeat penalty (1: off)") \
    F(e, seed, I64, 0, 0, REQ, "the sampler's seed")                     \
    F(e, n_predict, INT, 0, 1 << 20, OPT, "the most tokens a reply takes")

/* the cache after an event that changed it (grow, cow, fork, evict, truncate, offload, restore):
 * its conversation's totals and the pool's, so a reader's figures agree at every event */
#define EV_CACHE_FIELDS(F, e)                                                  \
    F(e, tokens, INT, 0, EV_BIG, REQ, "tokens cached")                         \
    F(e, capacity, INT, 0, EV_BIG, REQ, "tokens there is room for")            \
    F(e, bytes_used, I64, 0, 0, REQ, "bytes in use")                           \
    F(e, bytes_reserved, I64, 0, 0, REQ, "bytes allocated")                    \
    F(e, bytes_per_token, I64, 0, 0, REQ, "bytes a token takes")               \
    F(e, shared_blocks, INT, 0, EV_BIG, REQ, "blocks shared with a fork")      \
    F(e, host_bytes, I64, 0, 0, REQ, "bytes offloaded to host memory")         \
    F(e, pool_used, I64, 0, 0, REQ, "the pool's bytes in use")                 \
    F(e, blocks_used, INT, 0, EV_BIG, REQ, "paged: the pool's blocks in use")  \
    F(e, offloaded_convs, INT, 0, EV_BIG, REQ, "conversations in host memory") \
    F(e, draft, BOOL, 0, 0, OPT, "a drafter's cache (--draft)")                \
    F(e, own_pool, BOOL, 0, 0, OPT, "a drafter's own pool: the pool figures are its")

/* the settings a session runs under (its header's, a resume event's): the cache's and the chat's.
 * What an older kvchat did not write may be absent. */
#define EV_CACHESET_FIELDS(F, e)                                                \
    F(e, layout, STR, 0, 0, REQ, "paged or contiguous")                         \
    F(e, dtype, STR, 0, 0, REQ, "the cache's element type")                     \
    F(e, block_tokens, INT, 1, 1 << 20, REQ, "positions a block (paged)")       \
    F(e, window, INT, 1, 1 << 24, REQ, "the positions a conversation may hold") \
    F(e, grow_factor, NUM, 0, 1e6, OPT, "contiguous growth")                    \
    F(e, prealloc, BOOL, 0, 0, OPT, "contiguous: the whole window at once")     \
    F(e, pool_bytes, I64, 0, 0, OPT, "the pool's size (0: chosen at start)")
#define EV_CHATSET_FIELDS(F, e)                                                            \
    F(e, template, STR, 0, 0, REQ, "gpt2, dialogpt or none")                               \
    F(e, keep, INT, -1, EV_BIG, REQ, "tokens never evicted (-1: the template's preamble)") \
    F(e, evict_min, INT, 0, EV_BIG, REQ, "tokens evicted at least (0: a quarter)")         \
    F(e, evict, STR, 0, 0, REQ, "exact, shift or least-read")                              \
    F(e, evict_at, STR, 0, 0, OPT, "turn or full")                                         \
    F(e, fidelity, INT, 0, EV_BIG, REQ, "tokens between fidelity checks (0: none)")        \
    F(e, system, STR, 0, 0, OPT, "the system preamble (empty: the template's)")            \
    F(e, draft, STR, 0, 0, OPT, "the drafter (--draft), when on")                          \
    F(e, draft_max, INT, 1, 1 << 10, OPT, "its tokens a round at most")                    \
    F(e, draft_p_min, NUM, 0, 1, OPT, "a draft model's stop")                              \
    F(e, draft_fingerprint, STR, 0, 0, OPT, "a draft model's fingerprint")

#define EV_SCHEMA(E, F)                                                                          \
    E(MODEL, model, "the model a run loaded (first in a session)")                               \
    F(model, name, STR, 0, 0, OPT, "its name")                                                   \
    F(model, backend, STR, 0, 0, OPT, "cpu or cuda")                                             \
    F(model, params, I64, 0, 0, OPT, "parameters")                                               \
    F(model, weights_bytes, I64, 0, 0, OPT, "bytes of weights")                                  \
    F(model, pool_bytes, I64, 0, 0, OPT, "the KV pool's bytes")                                  \
    F(model, workspace_bytes, I64, 0, 0, OPT, "the forward pass's scratch bytes")                \
    F(model, n_ctx, INT, 0, EV_BIG, OPT, "the model's context")                                  \
    F(model, random_weights, BOOL, 0, 0, OPT, "a test model of random weights")                  \
    F(model, weights_dtype, STR, 0, 0, OPT, "f32, f16, bf16, q8 or q4")                          \
    F(model, memory_total_bytes, I64, 0, 0, OPT, "the device's memory (host RAM on the CPU)")    \
    E(NEW, new, "a conversation started")                                                        \
    F(new, window, INT, 1, W, OPT, "the most tokens its cache will hold")                        \
    E(USER, user, "a message")                                                                   \
    F(user, text, STR, 0, 0, REQ, "the message")                                                 \
    E(PREFILL, prefill, "a turn's new tokens went through the model")                            \
    F(prefill, ids, IDS, 0, 0, REQ, "the tokens this turn appended")                             \
    F(prefill, cached, INT, 0, W, REQ, "the conversation's tokens already cached")               \
    F(prefill, preamble, INT, 0, W, OPT, "of ids, the template's preamble")                      \
    F(prefill, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                          \
    E(TOKEN, token, "a generated token")                                                         \
    F(token, id, INT, 0, V - 1, REQ, "its id")                                                   \
    F(token, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                            \
    F(token, text, STR, 0, 0, OPT, "its complete UTF-8 text")                                    \
    F(token, drafted, BOOL, 0, 0, OPT, "a drafter proposed it, the model kept it")               \
    E(VERIFY, verify, "a speculative pass: the model checked the drafter's tokens at once")      \
    F(verify, drafted, INT, 0, 64, REQ, "tokens the drafter proposed")                           \
    F(verify, accepted, INT, 0, 64, REQ, "of them the ones the model kept")                      \
    F(verify, draft_ms, NUM, 0, EV_INF, OPT, "milliseconds drafting them")                       \
    F(verify, ms, NUM, 0, EV_INF, OPT, "milliseconds of the model's pass")                       \
    F(verify, draft_tokens, INT, 0, W, OPT, "the tokens its drafter's cache holds then")         \
    E(GROW, grow, "a contiguous cache grew (or a paged one took blocks)")                        \
    F(grow, from, INT, 0, EV_BIG, OPT, "capacity before, in tokens")                             \
    F(grow, to, INT, 0, EV_BIG, OPT, "capacity after")                                           \
    F(grow, bytes, I64, 0, 0, OPT, "bytes added")                                                \
    F(grow, copied, I64, 0, 0, OPT, "bytes copied")                                              \
    F(grow, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                             \
    F(grow, cache, CACHE, 0, 0, OPT, "the cache after it")                                       \
    E(COW, cow, "a shared block copied before a write")                                          \
    F(cow, copied, I64, 0, 0, OPT, "bytes copied")                                               \
    F(cow, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                              \
    F(cow, cache, CACHE, 0, 0, OPT, "the cache after it")                                        \
    E(SHARE, share, "another conversation's write or release changed what this one shares")      \
    F(share, cache, CACHE, 0, 0, REQ, "the cache after it")                                      \
    E(EVICT, evict, "the window slid: its first keep tokens, then all after the dropped ones")   \
    F(evict, keep, INT, 0, EV_BIG, OPT, "the first dropped position")                            \
    F(evict, dropped, INT, 0, EV_BIG, OPT, "tokens dropped")                                     \
    F(evict, recomputed, INT, 0, EV_BIG, OPT, "tokens recomputed after them")                    \
    F(evict, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                            \
    F(evict, mode, STR, 0, 0, OPT, "exact, or shift (approximate)")                              \
    F(evict, ranges, SPANS, 0, 0, REQ, "every dropped span (pinned turns may sit between)")      \
    F(evict, prepared, BOOL, 0, 0, OPT, "swapped in ready-made")                                 \
    F(evict, stall_ms, NUM, 0, EV_INF, OPT, "what the turn waited for it")                       \
    F(evict, ahead, INT, 0, EV_BIG, OPT, "prepared: the tokens its plan had recomputed")         \
    F(evict, ahead_ms, NUM, 0, EV_INF, OPT, "prepared: the milliseconds its plan took")          \
    F(evict, cache, CACHE, 0, 0, OPT, "the cache after it")                                      \
    E(ATTENTION, attention, "where a reply's tokens read: attention's weight per turn")          \
    F(attention, spans, SPANS, 0, 0, REQ, "the kept prefix, then each turn, as in the window")   \
    F(attention, mean, NUMS, 0, 1, REQ, "each span's weight, the mean over heads and layers")    \
    F(attention, max, NUMS, 0, 1, REQ, "each span's weight in the head that gave it the most")   \
    F(attention, turns, INTS, 0, EV_BIG, OPT, "each span's turn number (0: the kept prefix)")    \
    F(attention, tokens, INT, 1, EV_BIG, REQ, "the decode steps it averages")                    \
    E(PREPARE, prepare, "between turns, the next eviction made ahead")                           \
    F(prepare, tokens, INT, 0, EV_BIG, OPT, "tokens recomputed")                                 \
    F(prepare, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                          \
    F(prepare, ready, BOOL, 0, 0, OPT, "false when a message came first or memory was short")    \
    F(prepare, why, STR, 0, 0, OPT, "why it is not ready")                                       \
    F(prepare, longer, BOOL, 0, 0, OPT, "for a longer message (kept as far as it got)")          \
    E(TRUNCATE, truncate, "the cache cut back (retry, edit, clear, stop text, drafts)")          \
    F(truncate, from, INT, 0, W, OPT, "tokens before")                                           \
    F(truncate, to, INT, 0, W, REQ, "tokens after")                                              \
    F(truncate, bytes, I64, 0, 0, OPT, "cache bytes given back")                                 \
    F(truncate, cache, CACHE, 0, 0, OPT, "the cache after it")                                   \
    E(FORK, fork, "a conversation made from another, sharing its cache")                         \
    F(fork, parent, INT, 1, EV_CONV_MAX, OPT, "the conversation forked")                         \
    F(fork, tokens, INT, 0, EV_BIG, OPT, "tokens shared")                                        \
    F(fork, shared_blocks, INT, 0, EV_BIG, OPT, "blocks shared")                                 \
    F(fork, copied, I64, 0, 0, OPT, "bytes copied")                                              \
    F(fork, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                             \
    F(fork, cache, CACHE, 0, 0, OPT, "the cache after it")                                       \
    E(OFFLOAD, offload, "an idle conversation's cache moved to host memory")                     \
    F(offload, tokens, INT, 0, EV_BIG, OPT, "tokens moved")                                      \
    F(offload, bytes, I64, 0, 0, OPT, "bytes moved")                                             \
    F(offload, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                          \
    F(offload, cache, CACHE, 0, 0, OPT, "the cache after it")                                    \
    E(RESTORE, restore, "an offloaded cache moved back")                                         \
    F(restore, tokens, INT, 0, EV_BIG, OPT, "tokens moved")                                      \
    F(restore, bytes, I64, 0, 0, OPT, "bytes moved")                                             \
    F(restore, ms, NUM, 0, EV_INF, OPT, "milliseconds")                                          \
    F(restore, cache, CACHE, 0, 0, OPT, "the cache after it")                                    \
    E(STATS, stats, "the cache after each step of a turn")                                       \
    F(stats, tokens, INT, 0, W, OPT, "tokens cached")                                            \
    F(stats, capacity, INT, 0, EV_BIG, OPT, "tokens the cache has room for")                     \
    F(stats, window, INT, 1, W, OPT, "the most tokens a conversation's cache holds")             \
    F(stats, bytes_used, I64, 0, 0, OPT, "bytes in use")                                         \
    F(stats, bytes_reserved, I64, 0, 0, OPT, "bytes allocated")                                  \
    F(stats, pool_bytes, I64, 0, 0, OPT, "the pool's size")                                      \
    F(stats, pool_used, I64, 0, 0, OPT, "the pool's bytes in use")                               \
    F(stats, fragmentation, I64, 0, 0, OPT, "allocated but unused bytes")                        \
    F(stats, hit_rate, NUM, 0, 1, OPT, "tokens served from cache / tokens needed")               \
    F(stats, grows, INT, 0, EV_BIG, OPT, "growths so far")                                       \
    F(stats, evictions, INT, 0, EV_BIG, OPT, "evictions so far")                                 \
    F(stats, blocks_used, INT, 0, EV_BIG, OPT, "paged: blocks in use")                           \
    F(stats, blocks_total, INT, 0, EV_BIG, OPT, "paged: blocks in the pool")                     \
    F(stats, shared_blocks, INT, 0, EV_BIG, OPT, "blocks shared with a fork")                    \
    F(stats, offloaded_convs, INT, 0, EV_BIG, OPT, "conversations in host memory")               \
    F(stats, keep, INT, 0, W, OPT, "tokens never evicted")                                       \
    F(stats, evict_min, INT, 0, 65536, OPT, "the fewest tokens an eviction drops")               \
    F(stats, reply_room, INT, 0, W, OPT, "room a turn's start makes for its reply (--evict-at)") \
    F(stats, least_read, BOOL, 0, 0, OPT, "--evict least-read: the least-read turns go first")   \
    F(stats, cache_dtype, STR, 0, 0, OPT, "f32, f16, bf16 or int8")                              \
    F(stats, layout, STR, 0, 0, OPT, "paged or contiguous")                                      \
    F(stats, host_bytes, I64, 0, 0, OPT, "bytes offloaded to host memory")                       \
    F(stats, approximate, BOOL, 0, 0, OPT, "a shift eviction happened")                          \
    F(stats, memory_free, I64, 0, 0, OPT, "the device's free memory (host RAM on the CPU)")      \
    F(stats, memory_total, I64, 0, 0, OPT, "the device's memory")                                \
    E(FIDELITY, fidelity, "cached logits against a fresh prefill of the same window")            \
    F(fidelity, top1, BOOL, 0, 0, OPT, "the same next token")                                    \
    F(fidelity, kl, NUM, 0, EV_INF, OPT, "KL divergence")                                        \
    F(fidelity, tokens, INT, 0, EV_BIG, OPT, "the window's tokens")                              \
    F(fidelity, agree_rate, NUM, 0, 1, OPT, "checks agreeing so far")                            \
    F(fidelity, approximate, BOOL, 0, 0, OPT, "a shift eviction happened")                       \
    E(NOTICE, notice, "something the user should know")                                          \
    F(notice, text, STR, 0, 0, OPT, "for example a message cut to fit the window")               \
    F(notice, tokens, INT, 0, EV_BIG, OPT, "the message's tokens")                               \
    F(notice, kept, INT, 0, EV_BIG, OPT, "those kept")                                           \
    F(notice, cut_bytes, INT, 0, EV_BIG, OPT, "the bytes of the message's beginning that went")  \
    E(PIN, pin, "a turn pinned (never evicted) or unpinned")                                     \
    F(pin, turn, INT, 0, 1 << 20, REQ, "the turn")                                               \
    F(pin, pinned, BOOL, 0, 0, OPT, "pinned or not")                                             \
    E(RETRY, retry, "the last reply generated again")                                            \
    E(EDIT, edit, "the last message replaced")                                                   \
    E(CLEAR, clear, "every turn removed")                                                        \
    E(SET, set, "sampling settings changed (for every conversation's next reply)")               \
    EV_SAMPLING_FIELDS(F, set)                                                                   \
    E(TURN_END, turn_end, "a turn closed: everything a resume needs")                            \
    F(turn_end, reply, STR, 0, 0, REQ, "the reply")                                              \
    F(turn_end, tokens, INT, 0, 1 << 20, REQ, "the reply's tokens")                              \
    F(turn_end, cancelled, BOOL, 0, 0, OPT, "stopped by Ctrl-C")                                 \
    F(turn_end, failed, BOOL, 0, 0, OPT, "ended by an error")                                    \
    F(turn_end, window, IDS, 0, 0, REQ, "the window's token ids")                                \
    F(turn_end, turns, TURNS, 0, 0, REQ, "its turns")                                            \
    F(turn_end, keep, INT, 0, W, REQ, "tokens never evicted")                                    \
    F(turn_end, rng, STR, 0, 0, REQ, "the sampler's state, hex")                                 \
    F(turn_end, sampling, SAMPLING, 0, 0, REQ, "the settings of the reply")                      \
    F(turn_end, approximate, BOOL, 0, 0, OPT, "a shift eviction happened")                       \
    F(turn_end, reads, NUMS, 0, 1, OPT, "least-read: each turn's share of attention")            \
    F(turn_end, numbers, INTS, 1, EV_TURN_MAX, OPT,                                              \
      "each turn's number in the conversation, from 1")                                          \
    E(RESUME, resume, "a later run took the session up again (its settings as the header's)")    \
    F(resume, from, STR, 0, 0, OPT, "the session resumed")                                       \
    F(resume, window, INT, 1, 65536, OPT, "its window from here on")                             \
    F(resume, vocab_size, INT, 257, 1 << 24, OPT, "its vocabulary")                              \
    F(resume, weights_dtype, STR, 0, 0, OPT, "the weights' type")                                \
    F(resume, cache, CACHESET, 0, 0, OPT, "the cache settings")                                  \
    F(resume, chat, CHATSET, 0, 0, OPT, "the chat settings")                                     \
    E(RESTORED, restored, "a resume's caches in place, before its first action")                 \
    F(restored, prefilled, INTS, 1, EV_BIG, OPT,                                                 \
      "the conversations whose windows it prefilled again (the rest: --save-cache's snapshot)")  \
    F(restored, drafts, INTS, 1, EV_BIG, OPT,                                                    \
      "the conversations whose drafters' caches came from the snapshot (the rest start empty)")  \
    E(SYSTEM, system, "the system preamble of conversations still to start")                     \
    F(system, text, STR, 0, 0, REQ, "the preamble (\"\": the template's own)")

#define EV_SKIP_EVENT(NAME, name, doc)
#define EV_SKIP_FIELD(e, f, type, lo, hi, need, doc)

/* The kinds: EVK_PREFILL is the prefill event's; EVK_NONE is no event this schema declares. A
 * reader switches on ev_kind_of(ev), never on the type's text. */
#define EV_KIND_ENUM(NAME, name, doc) EVK_##NAME,
typedef enum { EVK_NONE = -1, EV_SCHEMA(EV_KIND_ENUM, EV_SKIP_FIELD) EVK_COUNT } ev_kind;
#undef EV_KIND_ENUM
ev_kind ev_kind_of(const json_t *ev);
const char *ev_kind_name(ev_kind k); /* "prefill"; NULL for EVK_NONE */

/* An event as its emitter writes it: a struct per event (ev_prefill, ...) whose members are the
 * fields, so that a misspelled one does not compile. A field that may be absent has a has_ flag
 * (absent stays distinct from 0): {.ms = 3.5, .has_ms = 1}, or EV_OPT(ms, 3.5). Arrays come with
 * their length in n_: ids and n_ids; a string with its length in bytes in _len, 0 for up to its
 * first 0 byte (a reply may hold the byte 0). model/events.c alone turns them into JSON. */
#define EV_OPT(f, v) .f = (v), .has_##f = 1
#define EV_MEMBER_INT(f) int f;
#define EV_MEMBER_I64(f) long long f;
#define EV_MEMBER_NUM(f) double f;
#define EV_MEMBER_STR(f) \
    const char *f;       \
    size_t f##_len;
#define EV_MEMBER_BOOL(f) int f;
#define EV_MEMBER_IDS(f) \
    const int *f;        \
    int n_##f;
#define EV_MEMBER_INTS(f) EV_MEMBER_IDS(f)
#define EV_MEMBER_NUMS(f) \
    const double *f;      \
    int n_##f;
#define EV_MEMBER_SPANS(f) EV_MEMBER_IDS(f) /* n_f pairs: 2 * n_f ints */
#define EV_MEMBER_TURNS(f) \
    const win_turn *f;     \
    int n_##f;
#define EV_MEMBER_SAMPLING(f) ev_sampling f;
#define EV_MEMBER_CACHE(f) ev_cache f;
#define EV_MEMBER_CACHESET(f) ev_cacheset f;
#define EV_MEMBER_CHATSET(f) ev_chatset f;
#define EV_MEMBER_OBJ(f) const json_t *f;
#define EV_HAS_REQ(f)
#define EV_HAS_OPT(f) int has_##f;
#define EV_MEMBER(e, f, type, lo, hi, need, doc) EV_MEMBER_##type(f) EV_HAS_##need(f)
typedef struct {
    EV_SAMPLING_FIELDS(EV_MEMBER, sampling)
} ev_sampling;
typedef struct {
    EV_CACHE_FIELDS(EV_MEMBER, cache)
} ev_cache;
typedef struct {
    EV_CACHESET_FIELDS(EV_MEMBER, cacheset)
} ev_cacheset;
typedef struct {
    EV_CHATSET_FIELDS(EV_MEMBER, chatset)
} ev_chatset;
#define EV_TYPEDEF(NAME, name, doc) typedef struct ev_##name ev_##name;
EV_SCHEMA(EV_TYPEDEF, EV_SKIP_FIELD)
#undef EV_TYPEDEF
/* each event's struct opens where the one before it closes; the first closes an empty opener.
 * Each starts with a member of no meaning: C has no empty struct (retry, edit, clear have no
 * fields). */
#define EV_STRUCT_OPEN(NAME, name, doc) \
    }                                   \
    ;                                   \
    struct ev_##name {                  \
        char no_fields_;
struct ev_schema_opener_ {
    int unused;
    EV_SCHEMA(EV_STRUCT_OPEN, EV_MEMBER)
};
#undef EV_STRUCT_OPEN
/* a set event's fields are a sampling block's, written flat */
#define EV_COPY_REQ(f)
#define EV_COPY_OPT(f) .has_##f = s->has_##f,
#define EV_COPY(e, f, type, lo, hi, need, doc) .f = s->f, EV_COPY_##need(f)
static inline ev_set ev_set_of(const ev_sampling *s)
{
    return (ev_set){EV_SAMPLING_FIELDS(EV_COPY, set)};
}
#undef EV_COPY

/* Typed reads of an event's fields, for events ev_check passed (the session reader's, or the
 * bus's own): ev_prefill_cached(ev) is its "cached" as an int; an absent field reads as 0, NULL or
 * false, and ev_prefill_has_cached(ev) tells it apart. The sampling block's: ev_sampling_temp.
 * A string's length in bytes, ev_token_text_len(ev): a reply may hold the byte 0 (GPT-2's token
 * 188), where the C string stops. */
/* an INT field as an int: a value no int holds reads as INT_MIN, which every range refuses (a cast
 * first read 4294967300 as 4, inside a range) */
static inline int ev_int_value(const json_t *j)
{
    json_int_t v = json_integer_value(j);
    return v < INT_MIN + 1 || v > INT_MAX ? INT_MIN : (int)v;
}
#define EV_CTYPE_INT int
#define EV_CTYPE_I64 long long
#define EV_CTYPE_NUM double
#define EV_CTYPE_STR const char *
#define EV_CTYPE_BOOL int
#define EV_CTYPE_IDS const json_t *
#define EV_CTYPE_NUMS const json_t *
#define EV_CTYPE_INTS const json_t *
#define EV_CTYPE_SPANS const json_t *
#define EV_CTYPE_TURNS const json_t *
#define EV_CTYPE_SAMPLING const json_t *
#define EV_CTYPE_CACHE const json_t *
#define EV_CTYPE_CACHESET const json_t *
#define EV_CTYPE_CHATSET const json_t *
#define EV_CTYPE_OBJ const json_t *
#define EV_GET_INT(j) ev_int_value(j)
#define EV_GET_I64(j) (long long)json_integer_value(j)
#define EV_GET_NUM(j) json_number_value(j)
#define EV_GET_STR(j) json_string_value(j)
#define EV_GET_BOOL(j) json_is_true(j)
#define EV_GET_IDS(j) (j)
#define EV_GET_NUMS(j) (j)
#define EV_GET_INTS(j) (j)
#define EV_GET_SPANS(j) (j)
#define EV_GET_TURNS(j) (j)
#define EV_GET_SAMPLING(j) (j)
#define EV_GET_CACHE(j) (j)
#define EV_GET_CACHESET(j) (j)
#define EV_GET_CHATSET(j) (j)
#define EV_GET_OBJ(j) (j)
#define EV_ACCESSOR(e, f, type, lo, hi, need, doc)               \
    static inline EV_CTYPE_##type ev_##e##_##f(const json_t *ev) \
    {                                                            \
        return EV_GET_##type(json_object_get(ev, #f));           \
    }                                                            \
    static inline int ev_##e##_has_##f(const json_t *ev)         \
    {                                                            \
        return json_object_get(ev, #f) != NULL;                  \
    }                                                            \
    static inline size_t ev_##e##_##f##_len(const json_t *ev)    \
    {                                                            \
        return json_string_length(json_object_get(ev, #f));      \
    }
EV_SCHEMA(EV_SKIP_EVENT, EV_ACCESSOR)
EV_SAMPLING_FIELDS(EV_ACCESSOR, sampling)
EV_CACHE_FIELDS(EV_ACCESSOR, cache)
EV_CACHESET_FIELDS(EV_ACCESSOR, cacheset)
EV_CHATSET_FIELDS(EV_ACCESSOR, chatset)
#undef EV_ACCESSOR

/* every event's own three */
static inline const char *ev_type(const json_t *ev)
{
    return EV_GET_STR(json_object_get(ev, "ev"));
}
static inline int ev_conv(const json_t *ev) { return EV_GET_INT(json_object_get(ev, "conv")); }
static inline double ev_t(const json_t *ev) { return EV_GET_NUM(json_object_get(ev, "t")); }
/* a fork that made a conversation (/fork's, naming its parent), not a drafter's cache forked with
 * it (the same event, its cache block marked draft) */
static inline int ev_fork_made_conv(const json_t *ev)
{
    return ev_kind_of(ev) == EVK_FORK && ev_fork_has_parent(ev) &&
           !json_is_true(json_object_get(json_object_get(ev, "cache"), "draft"));
}

/* NULL when ev is an event as declared (a known type, "conv", "t", each field's type and range,
 * and what ties its fields together), in a session of window W and vocabulary V; else why not,
 * naming the field (a thread's own buffer, valid until its next call). strict: a field that is
 * not declared is refused too (the bus's check of what it emits; a reader ignores them). */
const char *ev_check(const json_t *ev, long long W, long long V, int strict);
/* the same for a sampling block alone (the session header's), and a cache block */
const char *ev_check_sampling(const json_t *block);
const char *ev_check_cache(const json_t *block);
const char *ev_check_cacheset(const json_t *block);
const char *ev_check_chatset(const json_t *block);
/* model/README.md's events table, made from the schema */
void ev_print_table(FILE *f);

#endif
