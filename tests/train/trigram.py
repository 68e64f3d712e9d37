#!/usr/bin/env python3
"""The bar a trained model must clear: the held-out perplexity of a smoothed trigram model
(interpolated absolute discounting, D = 0.75, down to a uniform distribution over the vocabulary)
trained on the same training tokens (corpus.py's train.u16), on each held-out text, tokenized as
kvchat tokenizes it.

usage: trigram.py CORPUS_DIR [--kvchat PATH]"""
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
    for name in sorted(os.listdir(a.corpus)):
        if not name.startswith("heldout-"):
            continue
        text = open(os.path.join(a.corpus, name), "rb").read()
        h = [int(t) for t in subprocess.run([a.kvchat, "tokenize"], input=text,
                                            capture_output=True, check=True).stdout.split()]
        nll = 0.0
        for i in range(2, len(h)):
            p1 = (max(uni.get(h[i], 0) - D, 0) + D * len(uni) / V) / n_uni
            p2 = bi.prob(h[i - 1], h[i], p1)
            p3 = tri.prob((h[i - 2], h[i - 1]), h[i], p2)
            nll -= math.log(p3)
        print("%s: trigram perplexity %.1f over %d tokens" % (name, math.exp(nll / (len(h) - 2)),
                                                              len(h) - 2))


if __name__ == "__main__":
    main()
