#!/usr/bin/python3
"""kvchat bench --policy's figures against the float64 NumPy GPT-2's own distributions.

usage: policy_ref.py DIR BENCH.json
The JSON holds each run's window at every reply's start and after each eviction, and the reply
tokens; every token's window is rebuilt from them. For each rule and each reply token the reference
runs the whole-history window and the rule's, and computes KL(full || evicted) and whether the most
likely tokens agree; kvchat's figures must match to 1e-4 (relative, above 1e-4 absolute), except
top-1 at a near-tie. Each evicted window must be the whole history with parts left out, the same
where nothing is left out (KL 0), and the summary figures must be those of the per-token ones.
Prints the tokens checked and the largest difference; exits 1 on any mismatch."""
import json
import sys

import numpy as np

from gpt2_ref import GPT2


def windows(recs, ids, n):
    at = {r["at"]: r["ids"] for r in recs}
    w = None
    for k in range(n):
        if k in at:
            w = list(at[k])
        elif w is None or ids[k - 1] < 0:
            sys.exit("policy_ref.py: no window recorded for token %d" % k)
        else:
            w = w + [ids[k - 1]]
        yield w


def within(small, big):
    """small is big with parts left out (a subsequence)"""
    it = iter(big)
    return all(t in it for t in small)


def log_softmax(x):
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def main():
    m, b = GPT2(sys.argv[1]), json.load(open(sys.argv[2]))
    ids, n = b["reply_ids"], len(b["reply_ids"])
    full = list(windows(b["full_windows"], ids, n))
    cache = {}

    def dist(w):
        key = tuple(w)
        if key not in cache:
            lg = m.logits(w, last=True)[-1]
            cache[key] = (log_softmax(lg), np.sort(lg)[-2:])
        return cache[key]

    worst, checked, bad = 0.0, 0, []
    for r in b["rules"]:
        if len(r["kl"]) != n or len(r["top1_same"]) != n:
            sys.exit("policy_ref.py: %s has %d figures for %d tokens"
                     % (r["rule"], len(r["kl"]), n))
        compared = []
        for k, w in enumerate(windows(r["windows"], ids, n)):
            if not within(w, full[k]) or len(w) > b["window"]:
                bad.append("%s token %d: its window is not the history with parts left out"
                           % (r["rule"], k))
                continue
            lost = len(w) < len(full[k])
            if lost:
                compared.append(k)
            elif w != full[k]:
                bad.append("%s token %d: a window as long as the history, not the same"
                           % (r["rule"], k))
            pf, tf = dist(full[k])
            pe, te = dist(w)
            kl = float((np.exp(pf) * (pf - pe)).sum())
            d = abs(kl - r["kl"][k])
            worst = max(worst, d)
            if d > 1e-4 * max(1.0, kl):
                bad.append("%s token %d: KL %.6g, the reference %.6g"
                           % (r["rule"], k, r["kl"][k], kl))
            tie = min(tf[1] - tf[0], te[1] - te[0]) < 1e-4
            if not tie and (int(np.argmax(pf)) == int(np.argmax(pe))) != r["top1_same"][k]:
                bad.append("%s token %d: top-1 agreement %s, the reference's not"
                           % (r["rule"], k, r["top1_same"][k]))
            checked += 1
        kls = [r["kl"][k] for k in compared]
        agree = [r["top1_same"][k] for k in compared]
        if len(compared) != r["compared"] or (kls and (
                abs(np.mean(kls) - r["kl_mean"]) > 1e-9 * max(1, r["kl_mean"])
                or abs(max(kls) - r["kl_max"]) > 1e-12 or abs(np.mean(agree) - r["top1"]) > 1e-12)):
            bad.append("%s: the summary is not that of its %d tokens" % (r["rule"], len(compared)))
    print("%d tokens, largest KL difference %.3g" % (checked, worst))
    for line in bad[:5]:
        print(line)
    sys.exit(1 if bad or not checked else 0)


if __name__ == "__main__":
    main()
