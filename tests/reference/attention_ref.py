#!/usr/bin/python3
"""kvchat's attention events against the float64 NumPy GPT-2's own attention weights.

usage: attention_ref.py DIR EVENTS   (a chat's --events file, written with --attention 1)
Each conversation's window is rebuilt from the events (prefill, token, evict, truncate); at each
attention event the reference runs that window, takes the last position's softmax weights of every
head and layer, sums them over the event's spans and reduces them as kvchat does (the mean over
heads and layers, the most any head gave). Prints the events checked and the largest difference;
exits 1 when one is over 1e-5, or when the window cannot be rebuilt."""
import json
import sys

import numpy as np

from gpt2_ref import GPT2


def main():
    m = GPT2(sys.argv[1])
    windows, checked, worst = {}, 0, 0.0
    for line in open(sys.argv[2]):
        ev = json.loads(line)
        kind, w = ev["ev"], windows.setdefault(ev["conv"], [])
        if kind == "prefill":
            w[ev["cached"]:] = ev["ids"]
        elif kind == "token":
            w.append(ev["id"])
        elif kind == "evict":
            gone = {p for s, n in ev["ranges"] for p in range(s, s + n)}
            w[:] = [t for i, t in enumerate(w) if i not in gone]
        elif kind == "truncate":
            del w[ev["to"]:]
        elif kind == "attention":
            if ev["tokens"] != 1:
                sys.exit("attention_ref.py: an event of %d tokens (run the chat with --attention 1)"
                         % ev["tokens"])
            spans = ev["spans"]
            if spans[-1][0] + spans[-1][1] != len(w):
                sys.exit("attention_ref.py: spans end at %d, the rebuilt window at %d"
                         % (spans[-1][0] + spans[-1][1], len(w)))
            reading = []
            m.logits(w, reading)
            r = np.stack(reading)  # [layers, heads, positions]
            mass = np.stack([r[:, :, s:s + n].sum(-1) for s, n in spans], -1)
            mean, most = mass.mean((0, 1)), mass.max((0, 1))
            worst = max(worst, np.abs(mean - ev["mean"]).max(), np.abs(most - ev["max"]).max())
            checked += 1
    print("%d attention events, largest difference %.3g" % (checked, worst))
    sys.exit(0 if checked and worst < 1e-5 else 1)


if __name__ == "__main__":
    main()
