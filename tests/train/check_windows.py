#!/usr/bin/env python3
"""train.py's windows against their definition, on documents of every kind of length: a window
that starts in a document at least a window long lies wholly inside it (its <|endoftext|> at most
the last token predicted), every place in such a document opens some window, and a window that
starts in a shorter one is left where it starts. Exits 1 on a window that breaks it."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

CTX, EOT = 32, train.EOT
lengths = [3, 100, 7, 2000, 40, 33, 34, 500]
data = np.concatenate([np.concatenate([np.arange(1, n + 1), [EOT]]) for n in lengths])
ends = np.flatnonzero(data == EOT)
starts = np.arange(len(data))  # every place, the last document's too
moved = train.within_documents(starts, ends, CTX, len(data))
bad, opened = 0, set()
for p, q in zip(starts, moved):
    d = np.searchsorted(ends, p)
    lo, hi = (ends[d - 1] + 1 if d else 0), ends[d]
    if hi - lo >= CTX:
        bad += not (lo <= q and q + CTX <= hi)
        opened.add(int(q))
    else:
        bad += q != p
for d, n in enumerate(lengths):
    lo = ends[d - 1] + 1 if d else 0
    if n >= CTX:
        bad += any(s not in opened for s in range(lo, lo + n - CTX + 1))
print("%d windows, %d outside the rule" % (len(starts), bad))
sys.exit(int(bad > 0))
