#!/usr/bin/env python3
"""The bar a trained model must clear: the held-out perplexity of a smoothed trigram model
(interpolated absolute discounting, D = 0.75, down to a uniform distribution over the vocabulary)
trained on the same training tokens (corpus.py's train.u16), on each held-out text, tokenized as
kvchat tokenizes it. With --positions FILE, its loss by position on the windows kvchat perplexity
--positions --stride S --ctx C --tokens N scores (each token at every position bucket with a small
stride): the curve of a model that reads two tokens back, beside the model's.

usage: trigram.py CORPUS_DIR [--kvchat PATH] [--positions FILE --ctx C --stride S --tokens N]"""
import argparse
import math
import os
import subprocess
from collections import Counter, defaultdict

import numpy as np

V, D = 50257, 0.75


class Level:
    """counts of the next token after each context, for absolute discounting"""

    def __init__(self):
        self.next = defaultdict(Counter)

    def add(self, ctx, tok):
        self.next[ctx][tok] += 1

    def prob(self, ctx, tok, lower):
        c = self.next.get(ctx)
        if not c:
            return lower
        return max(c.get(tok, 0) - D, 0) / c.total_ + D * len(c) / c.total_ * lower


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--kvchat", default="build/kvchat")
    ap.add_argument("--positions", metavar="FILE")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--stride", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=1 << 40)
    a = ap.parse_args()
    ids = np.fromfile(os.path.join(a.corpus, "train.u16"), dtype=np.uint16).tolist()
    uni, bi, tri = Counter(ids), Level(), Level()
    for i in range(1, len(ids)):
        bi.add(ids[i - 1], ids[i])
        if i >= 2:
            tri.add((ids[i - 2], ids[i - 1]), ids[i])
    for level in (bi, tri):  # each context's total, once
        for c in level.next.values():
            c.total_ = sum(c.values())
    n_uni = len(ids)

    def loss(h, i):  # of h[i] given at most the two tokens before it
        p = (max(uni.get(h[i], 0) - D, 0) + D * len(uni) / V) / n_uni
        if i >= 1:
            p = bi.prob(h[i - 1], h[i], p)
        if i >= 2:
            p = tri.prob((h[i - 2], h[i - 1]), h[i], p)
        return -math.log(p)

    def tokens(path):
        text = open(path, "rb").read()
        return [int(t) for t in subprocess.run([a.kvchat, "tokenize"], input=text,
                                               capture_output=True, check=True).stdout.split()]

    if a.positions:
        h, sums, scored, s0 = tokens(a.positions), {}, 0, 0
        while s0 + 1 < len(h) and scored < a.tokens:
            w = h[s0 : s0 + a.ctx]
            for j in range(1, len(w)):
                if scored == a.tokens:
                    break
                sums.setdefault(j, []).append(loss(w, j))
                scored += 1
            s0 += a.stride
        out, lo, hi = [], 0, 31
        while lo < a.ctx:
            vals = [v for j in range(lo, min(hi, a.ctx - 1) + 1) for v in sums.get(j, [])]
            if vals:
                out.append("%d-%d %.3f" % (lo, min(hi, a.ctx - 1), sum(vals) / len(vals)))
            lo, hi = hi + 1, 2 * hi + 1
        print("trigram loss by position in the window (%d tokens scored):  %s" % (
            scored, "  ".join(out)))
        return
    for name in sorted(os.listdir(a.corpus)):
        if not (name.startswith("heldout-") and name.endswith(".txt")):
            continue
        h = tokens(os.path.join(a.corpus, name))
        nll = sum(loss(h, i) for i in range(2, len(h)))
        print("%s: trigram perplexity %.1f over %d tokens" % (name, math.exp(nll / (len(h) - 2)),
                                                              len(h) - 2))


if __name__ == "__main__":
    main()
