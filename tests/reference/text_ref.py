#!/usr/bin/python3
"""kvchat bench --policy --text's figures against a float64 NumPy GPT-2 that keeps its own cache.

usage: text_ref.py DIR IDS BENCH.json
IDS: the text's ids, comma-separated (kvchat tokenize). BENCH.json: kvchat bench --policy --text
--json, f32 weights and cache. For every document, budget and rule the reference reads the document
token by token with a cache of its own: the full run, and each rule's run from the step at which the
budget fills. It checks each recorded eviction against the rule's definition (exact and shift: the
oldest quarter of the budget; window: the oldest token; sinks+window: the oldest after four;
H2O: the least attention received so far outside the recent half; TOVA: the least attention from the
token just read, the mean over layers and heads; a choice within 1e-5 of the least passes), then
replays it: exact computes what remains again at positions from 0; shift keeps the keys and goes on
at the cache's length; the token rules keep the keys and go on at true positions. Each token's
KL(full || rule), top-1 agreement and loss must be kvchat's (1e-4, relative above 1e-4). Prints
what it checked; exits 1 on a difference."""
import json
import sys

import numpy as np

from gpt2_ref import GPT2

RULES = ("exact", "shift", "window", "sinks+window", "H2O", "TOVA")
SINKS = 4


class Cache:
    """one run's keys and values, layer by layer, and its tokens' document positions"""

    def __init__(self, m):
        self.m, self.k, self.v, self.pos = m, [[] for _ in range(m.L)], [[] for _ in range(m.L)], []

    def copy(self, n):
        c = Cache(self.m)
        c.k, c.v, c.pos = [l[:n] for l in self.k], [l[:n] for l in self.v], self.pos[:n]
        return c

    def drop(self, idx):
        keep = [i for i in range(len(self.pos)) if i not in set(idx)]
        self.k = [[l[i] for i in keep] for l in self.k]
        self.v = [[l[i] for i in keep] for l in self.v]
        self.pos = [self.pos[i] for i in keep]

    def step(self, tok, position, doc_pos):
        """one token at `position`: its log-softmax and each cached token's mean attention"""
        m, w, C, H = self.m, self.m.w, self.m.C, self.m.H
        hd = C // H
        x = w["wte.weight"][tok] + w["wpe.weight"][position]
        mass = []
        for l in range(m.L):
            p = "h.%d." % l
            qkv = m.ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = (qkv[i * C:(i + 1) * C].reshape(H, hd) for i in range(3))
            self.k[l].append(k)
            self.v[l].append(v)
            K, V = np.stack(self.k[l], 1), np.stack(self.v[l], 1)  # [H, n, hd]
            s = np.einsum("hd,hnd->hn", q, K) / np.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            mass.append(s)
            y = np.einsum("hn,hnd->hd", s, V).reshape(C)
            x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = m.ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
            h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
            x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        self.pos.append(doc_pos)
        z = m.ln(x, "ln_f") @ w["wte.weight"].T
        z = z - z.max()
        return z - np.log(np.exp(z).sum()), np.stack(mass).mean((0, 1))


def close(a, b):
    return abs(a - b) <= 1e-4 * max(abs(a), abs(b), 1.0)


def check_doc(m, ids, rule, B, rec, full_lp, full_acc, fork):
    """one rule's run over one document at budget B against kvchat's record; returns tokens"""
    c, lost, score, k, P = fork.copy(B), 0, list(full_acc[:B]), 0, len(ids)
    drops = {t: gone for t, gone in rec["drops"]}
    for t in range(B, P - 1):
        n = len(c.pos)
        position = n if rule in ("exact", "shift") else t
        lp, mass = c.step(ids[t], position, t)
        if rule == "H2O":
            score = [s + mass[j] for j, s in enumerate(score)] + [mass[n]]
        if lost:
            kl = max(float((np.exp(full_lp[t]) * (full_lp[t] - lp)).sum()), 0.0)
            got = (rec["kl"][k], rec["nll"][k])
            if not close(kl, got[0]) or not close(-lp[ids[t + 1]], got[1]):
                sys.exit("%s at %d, token %d: KL %.6g, loss %.6g; NumPy's %.6g, %.6g"
                         % (rule, B, t, got[0], got[1], kl, -lp[ids[t + 1]]))
            top, ftop = int(lp.argmax()), int(full_lp[t].argmax())
            srt_f, srt = np.sort(full_lp[t]), np.sort(lp)
            tie = srt_f[-1] - srt_f[-2] < 1e-4 or srt[-1] - srt[-2] < 1e-4
            if (top == ftop) != rec["top1"][k] and not tie:
                sys.exit("%s at %d, token %d: top-1 %s, NumPy's %s"
                         % (rule, B, t, rec["top1"][k], top == ftop))
            k += 1
        if len(c.pos) <= B:
            if t in drops:
                sys.exit("%s at %d: an eviction at token %d, under the budget" % (rule, B, t))
            continue
        gone = drops.get(t)
        if gone is None:
            sys.exit("%s at %d: no eviction at token %d, over the budget" % (rule, B, t))
        idx = [c.pos.index(p) for p in gone]
        n = len(c.pos)
        if rule in ("exact", "shift"):
            want = list(range(max(B // 4, 1)))
            ok = idx == want
        elif rule == "window":
            ok = idx == [0]
        elif rule == "sinks+window":
            ok = idx == [SINKS]
        else:
            cand = score[:n - B // 2] if rule == "H2O" else list(mass)
            ok = len(idx) == 1 and cand[idx[0]] <= min(cand) + 1e-5 * max(1.0, abs(min(cand)))
        if not ok:
            sys.exit("%s at %d, token %d: dropped positions %s, not the rule's"
                     % (rule, B, t, gone))
        c.drop(idx)
        if rule == "H2O":
            score = [s for j, s in enumerate(score) if j not in idx]
        if rule == "exact":  # what remains, computed again from position 0
            kept, c = c.pos, Cache(m)
            for i, p in enumerate(kept):
                c.step(ids[p], i, p)
        lost += len(idx)
    if k != len(rec["kl"]):
        sys.exit("%s at %d: kvchat compared %d tokens, NumPy %d" % (rule, B, len(rec["kl"]), k))
    return k


def main():
    m = GPT2(sys.argv[1])
    all_ids = [int(t) for t in sys.argv[2].split(",")]
    got = json.load(open(sys.argv[3]))
    P = got["positions"]
    tokens = 0
    for d, s0 in enumerate(got["starts"]):
        ids = all_ids[s0:s0 + P]
        full, full_lp, acc = Cache(m), [], np.zeros(P)
        forks = {}
        for t in range(P - 1):
            forks[t] = None
            if any(r["budget"] == t for r in got["rules"]):
                forks[t] = (full.copy(t), acc[:t].copy())
            lp, mass = full.step(ids[t], t, t)
            acc[:t + 1] += mass
            full_lp.append(lp)
        for r in got["rules"]:
            fork, facc = forks[r["budget"]]
            tokens += check_doc(m, ids, r["rule"], r["budget"], r["documents"][d], full_lp, facc,
                                fork)
    print("%d documents, %d rule runs, %d tokens compared = NumPy's"
          % (len(got["starts"]), len(got["rules"]), tokens))


if __name__ == "__main__":
    main()
