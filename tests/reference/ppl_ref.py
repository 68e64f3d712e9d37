#!/usr/bin/python3
"""kvchat perplexity's figures against NumPy's.

usage: ppl_ref.py DIR IDS CTX STRIDE RUN.json [BASE.bin]
IDS: the text's ids, comma-separated. RUN.json: kvchat perplexity --json of that text with --ctx CTX
--stride STRIDE (STRIDE = CTX: --positions; pN: --positions --stride N), f32 weights and cache. Each scored token's loss must be
the float64 NumPy model's (gpt2_ref.py) within 1e-4 nats, and the perplexity within 1e-5 of it
(relative). With BASE.bin (a --save-logits file of another run of the text: another cache type),
RUN.json comes from --kl-divergence BASE.bin: its mean KL, 99th percentile and top-1 agreement must
be those of BASE's rows (normalised again after f16's rounding) against NumPy's distributions.
Prints a summary; exits 1 on a difference."""
import json
import sys

import numpy as np

import gpt2_ref


def read_saved(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"KVPPLv1\0":
        sys.exit("%s: not a --save-logits file" % path)
    V, n = np.frombuffer(data[8:16], "<i4")
    rows = np.frombuffer(data[16:], np.uint8).reshape(n, 12 + 2 * V)
    ids = rows[:, 0:4].copy().view("<i4")[:, 0]
    top = rows[:, 4:8].copy().view("<i4")[:, 0]
    lp = rows[:, 12:].copy().view("<f2").astype(np.float64)
    mx = lp.max(axis=1, keepdims=True)  # each row a distribution again, as kvchat reads it
    return ids, top, lp - mx - np.log(np.exp(lp - mx).sum(axis=1, keepdims=True))


def main():
    d, run = sys.argv[1], sys.argv[5]
    ids, ctx, stride = [int(t) for t in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4]
    m = gpt2_ref.GPT2(d)
    positions, stride = stride.startswith("p"), int(stride.lstrip("p"))
    first = 1 if positions or stride == ctx else ctx - stride
    want, dists, s0 = [], [], 0
    while s0 + first < len(ids):
        w = ids[s0:s0 + ctx]
        z = m.logits(w)
        z = z - z.max(axis=1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        want += [-lp[j - 1, w[j]] for j in range(first, len(w))]
        dists += [lp[j - 1] for j in range(first, len(w))]
        s0 += stride
    got = json.load(open(run))
    nll = np.array([t["nll"] for t in got["tokens"]])
    if len(nll) != len(want):
        sys.exit("kvchat scored %d tokens, NumPy's windows %d" % (len(nll), len(want)))
    diff = np.abs(nll - np.array(want)).max()
    ppl = np.exp(np.mean(want))
    rel = abs(got["perplexity"] - ppl) / ppl
    if diff > 1e-4 or rel > 1e-5:
        sys.exit("losses differ by up to %.3g nats; PPL %.6f, NumPy's %.6f"
                 % (diff, got["perplexity"], ppl))
    out = "%d tokens, losses within %.1g nats, PPL %.4f = NumPy's" % (len(nll), diff, ppl)
    if len(sys.argv) > 6:
        bids, btop, blp = read_saved(sys.argv[6])
        lp = np.array(dists)
        kl = np.maximum((np.exp(blp) * (blp - lp)).sum(axis=1), 0)
        p99 = np.sort(kl)[int(0.99 * (len(kl) - 1))]
        mine = (kl.mean(), p99, (btop == lp.argmax(axis=1)).mean())
        theirs = (got["kl_mean"], got["kl_p99"], got["top1"])
        if list(bids) != [t["id"] for t in got["tokens"]] or abs(mine[2] - theirs[2]) > 1e-6 or \
                any(abs(a - b) > 1e-3 * a + 1e-9 for a, b in zip(mine[:2], theirs[:2])):
            sys.exit("KL mean %.6g p99 %.6g top-1 %.4f; NumPy's %.6g %.6g %.4f" % (theirs + mine))
        out += "; KL %.3g (p99 %.3g, top-1 %.1f%%) = NumPy's" % (mine[0], mine[1], 100 * mine[2])
    print(out)


if __name__ == "__main__":
    main()
