#!/usr/bin/python3
"""kvchat perplexity --repeat and --recall against the float64 NumPy model (gpt2_ref.py).

usage: copy_ref.py repeat DIR IDS OUT        IDS: the text's ids, comma-separated
       copy_ref.py recall DIR CHATS OUT      CHATS: the recall chats (JSON lines)
OUT: what kvchat printed (f32 weights and cache). repeat: the passages (100 tokens, then the
150-300 that follow, then the 100 again, the gap from the splitmix64 of the passage's number),
and the losses of the two readings from their third token on, must be kvchat's to its printed
digits. recall: the chats written as the gpt2 template writes them (encoded by bpe_ref.py, the
independent encoder), the fill's tokens found by their bytes, and the top-1 guesses of each with
the fact and with the first exchange left out: the counts must be kvchat's exactly.
Prints a summary; exits 1 on a difference."""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import bpe_ref
import gpt2_ref

PASSAGE, GAP_MIN, GAP_MAX, SKIP = 100, 150, 300, 2
M64 = (1 << 64) - 1
PREAMBLE = "A conversation between a curious user and a helpful assistant.\n"


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def losses(m, seq):
    z = m.logits(seq)
    z = z - z.max(axis=1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return [0.0] + [-lp[j - 1, seq[j]] for j in range(1, len(seq))], lp


def repeat(m, ids, ctx, out):
    first = second = n = 0.0
    count, s = 0, 0
    while True:
        gap = min(GAP_MIN + mix(count) % (GAP_MAX - GAP_MIN + 1), ctx - 2 * PASSAGE)
        if s + PASSAGE + gap > len(ids):
            break
        seq = ids[s : s + PASSAGE + gap] + ids[s : s + PASSAGE]
        loss, _ = losses(m, seq)
        first += sum(loss[SKIP:PASSAGE])
        second += sum(loss[PASSAGE + gap + SKIP :])
        n += PASSAGE - SKIP
        s += PASSAGE + gap
        count += 1
    want = [count, first / n, second / n, (first - second) / n]
    g = re.search(r"repeat: (\d+) passages", out)
    f = re.search(r"loss ([-\d.]+) at the first reading, ([-\d.]+) at the second .* a drop of "
                  r"([-\d.]+) nats", out)
    if not g or not f:
        sys.exit("kvchat printed no repeat figures:\n" + out)
    got = [int(g.group(1))] + [float(x) for x in f.groups()]
    bad = got[0] != want[0] or any(abs(a - b) > 1.5e-3 for a, b in zip(got[1:], want[1:]))
    print("%d passages: first %.4f, second %.4f, drop %.4f (kvchat %s)" % (*want, got[1:]))
    return bad


def encode(texts):
    """each text's ids, by the independent encoder"""
    here = os.path.dirname(os.path.abspath(__file__))
    assets = os.path.join(here, "..", "..", "assets")
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, t in enumerate(texts):
            paths.append(os.path.join(d, "%d" % i))
            open(paths[-1], "w").write(t)
        r = subprocess.run([sys.executable, os.path.join(here, "bpe_ref.py"),
                            os.path.join(assets, "vocab.json"), os.path.join(assets, "merges.txt")]
                           + paths, capture_output=True, text=True, check=True)
    return [[int(x) for x in ln.split()] for ln in r.stdout.split("\n")[: len(texts)]]


def recall(m, path, out):
    piece = bpe_ref.pieces(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "assets", "vocab.json"))
    chats = [json.loads(ln) for ln in open(path) if ln.strip()]
    right, tokens = [0, 0], 0
    for c in chats:
        turns, answer, fill = c["turns"], c["answer"], c["fill"]
        msgs, replies = turns[0::2], turns[1::2] + [answer]
        fill_ids = None
        for drop in (0, 1):
            texts = [PREAMBLE]
            for t in range(drop, len(msgs)):
                texts.append(("" if t == drop else "\n") + "User: %s\nAssistant:" % msgs[t])
                texts.append(" " + replies[t])
            segs = encode(texts)
            prefix = [i for s in segs[:-1] for i in s]
            ans = segs[-1]
            at = 1 + answer.index(fill)
            spans, pos = [], 0
            for i in ans:
                spans.append((pos, pos + len(piece[i])))
                pos += len(piece[i])
            which = [k for k, (a, b) in enumerate(spans) if a < at + len(fill) and b > at]
            _, lp = losses(m, prefix + ans)
            guesses = lp.argmax(axis=1)
            right[drop] += sum(int(guesses[len(prefix) + k - 1] == ans[k]) for k in which)
            fill_ids = which
        tokens += len(fill_ids)
    g = re.search(r"recall: (\d+) chats, (\d+) fill tokens", out)
    f = re.search(r"top-1 with the fact in the window (\d+) .*with it never said (\d+)", out)
    if not g or not f:
        sys.exit("kvchat printed no recall figures:\n" + out)
    got = [int(x) for x in g.groups() + f.groups()]
    want = [len(chats), tokens] + right
    print("%d chats, %d fill tokens, top-1 %d with the fact, %d without (kvchat %s)" % (
        *want, got))
    return got != want


def main():
    mode, d, arg, out = sys.argv[1:5]
    m = gpt2_ref.GPT2(d)
    out = open(out).read()
    if mode == "repeat":
        ctx = json.load(open(os.path.join(d, "config.json")))["n_ctx"]
        bad = repeat(m, [int(t) for t in arg.split(",")], ctx, out)
    else:
        bad = recall(m, arg, out)
    sys.exit(int(bad))


if __name__ == "__main__":
    main()
