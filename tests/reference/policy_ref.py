#!/usr/bin/python3
"""kvchat bench --policy's figures against the float64 NumPy GPT-2's own distributions.

usage: policy_ref.py DIR BENCH.json [RECALL.jsonl]
The JSON holds, per conversation, each run's window at every reply's start and after each
eviction, and the reply tokens; every token's window is rebuilt from them. For each exact rule and
each reply token the reference runs the whole-history window and the rule's, and computes
KL(full || evicted) and whether the most likely tokens agree; kvchat's figures must match to 1e-4
(relative, above 1e-4 absolute), except top-1 at a near-tie. Each evicted window must be the whole
history with parts left out, the same where nothing is left out (KL 0), and each rule's summary
(tokens, mean KL, top-1 over the conversations) must be that of its per-token figures. Shift's
windows are checked as windows only: its keys keep the positions they were computed at. The
oracle's pick is checked on its own terms: at a conversation's first eviction every rule starts
from the same history, and dropping the oldest turn first is one of the oracle's trials, so the
reference's reply loss under the oracle's window must be as near the full history's as under
oldest-first's (to the oracle's tie, 1e-4 nats). With the recall chats, each rule's answers' fill
tokens (found by their bytes) and how many of them the rule's window made the most likely token
must be the reference's.
Prints the tokens checked and the largest difference; exits 1 on any mismatch."""
import json
import os
import sys

import numpy as np

import bpe_ref
from gpt2_ref import GPT2

EOT = 50256


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


def check_run(m, dist, conv, r, full, bad):
    """one rule's run over one conversation: its tokens compared, their KLs and agreements"""
    ids, n = conv["reply_ids"], len(conv["reply_ids"])
    if len(r["kl"]) != n or len(r["top1_same"]) != n:
        sys.exit("policy_ref.py: %s has %d figures for %d tokens" % (r["rule"], len(r["kl"]), n))
    name, worst, kls, agree = "%s in %d" % (r["rule"], r["window"]), 0.0, [], []
    for k, w in enumerate(windows(r["windows"], ids, n)):
        if not within(w, full[k]) or len(w) > r["window"]:
            bad.append("%s token %d: its window is not the history with parts left out" % (name, k))
            continue
        if len(w) < len(full[k]):
            kls.append(r["kl"][k])
            agree.append(r["top1_same"][k])
        elif w != full[k]:
            bad.append("%s token %d: a window as long as the history, not the same" % (name, k))
        if r["approximate"]:
            continue  # shift's keys keep their old positions: no window recomputes them
        pf, tf = dist(full[k])
        pe, te = dist(w)
        kl = float((np.exp(pf) * (pf - pe)).sum())
        d = abs(kl - r["kl"][k])
        worst = max(worst, d)
        if d > 1e-4 * max(1.0, kl):
            bad.append("%s token %d: KL %.6g, the reference %.6g" % (name, k, r["kl"][k], kl))
        tie = min(tf[1] - tf[0], te[1] - te[0]) < 1e-4
        if not tie and (int(np.argmax(pf)) == int(np.argmax(pe))) != r["top1_same"][k]:
            bad.append("%s token %d: top-1 agreement %s, the reference's not"
                       % (name, k, r["top1_same"][k]))
    return worst, kls, agree, 0 if r["approximate"] else n


def reply_nll(dist, ws, ids, lo, hi):
    """the loss of reply tokens lo..hi-1 (the end of text not counted, as the oracle counts)"""
    return sum(-dist(ws[k])[0][ids[k]] for k in range(lo, hi) if ids[k] != EOT)


def check_oracle(dist, conv, full, bad):
    """in the reply whose tokens first lost history: |oracle - full| <= |oldest - full|"""
    ids, starts = conv["reply_ids"], [w["at"] for w in conv["full_windows"]]
    runs = {r["rule"]: r for r in conv["runs"] if r["rule"] in ("oracle", "oldest-first")}
    if len(runs) < 2:
        return 0
    ws = {k: list(windows(r["windows"], ids, len(ids))) for k, r in runs.items()}
    for lo, hi in zip(starts, starts[1:] + [len(ids)]):
        lost = [any(len(ws[k][i]) < len(full[i]) for i in range(lo, hi)) for k in ws]
        if not any(lost):
            continue
        f = reply_nll(dist, full, ids, lo, hi)
        o, old = (abs(reply_nll(dist, ws[k], ids, lo, hi) - f) for k in ("oracle", "oldest-first"))
        if not all(lost) or o > old + 1e-4:
            bad.append("oracle at token %d: reply loss %.6g from the full history's, oldest-first "
                       "%.6g" % (lo, o, old))
        return 1
    return 0


def fill_tokens(piece, ids, answer, fill):
    """which of the answer's tokens hold the fill: their bytes overlap it in " " + answer"""
    text, want = (" " + answer).encode(), fill.encode()
    at, pos, which = text.index(want), 0, []
    for k, i in enumerate(ids):
        n = len(piece[i]) if i != EOT else 0
        if pos < at + len(want) and pos + n > at:
            which.append(k)
        pos += n
    return which


def check_fills(dist, b, chats, bad):
    """per rule and window: the answers' fill tokens and those the rule's window got top-1"""
    got, piece = {}, bpe_ref.pieces(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                 "..", "assets", "vocab.json"))
    for conv, c in zip(b["conversations"], chats):
        ids, starts = conv["reply_ids"], [w["at"] for w in conv["full_windows"]]
        if len(starts) != len(c["turns"][0::2]):
            continue  # the question did not fit the model's positions
        answer = fill_tokens(piece, ids[starts[-1]:], c["answer"], c["fill"])
        which = [starts[-1] + k for k in answer]
        for r in conv["runs"]:
            ws = list(windows(r["windows"], ids, len(ids)))
            g = got.setdefault((r["rule"], r["window"]), [0, 0])
            g[0] += len(which)
            g[1] += sum(int(np.argmax(dist(ws[k])[0])) == ids[k] for k in which)
    for s in b["rules"]:
        q, (n, right) = s["recall"], got.get((s["rule"], s["window"]), (0, 0))
        kv = round(q["fill_top1"] * q["fill_tokens"]) if q["fill_tokens"] else 0
        if q["fill_tokens"] != n or kv != right:
            bad.append("%s in %d: %d of %d fill tokens top-1, the reference %d of %d"
                       % (s["rule"], s["window"], kv, q["fill_tokens"], right, n))
    return sum(g[0] for g in got.values())


def main():
    m, b = GPT2(sys.argv[1]), json.load(open(sys.argv[2]))
    cache = {}

    def dist(w):
        key = tuple(w)
        if key not in cache:
            lg = m.logits(w, last=True)[-1]
            cache[key] = (log_softmax(lg), np.sort(lg)[-2:])
        return cache[key]

    worst, checked, bad, pooled, picks = 0.0, 0, [], {}, 0
    for conv in b["conversations"]:
        ids = conv["reply_ids"]
        full = list(windows(conv["full_windows"], ids, len(ids)))
        picks += check_oracle(dist, conv, full, bad)
        for r in conv["runs"]:
            d, kls, agree, n = check_run(m, dist, conv, r, full, bad)
            worst, checked = max(worst, d), checked + n
            p = pooled.setdefault((r["rule"], r["window"]), ([], []))
            p[0].extend(kls)
            p[1].extend(agree)
    for s in b["rules"]:
        kls, agree = pooled[(s["rule"], s["window"])]
        f = s["figures"]
        if len(kls) != f["tokens"] or (kls and (
                abs(np.mean(kls) - f["kl_mean"]) > 1e-9 * max(1, f["kl_mean"])
                or abs(np.mean(agree) - f["top1"]) > 1e-12)):
            bad.append("%s in %d: the summary is not that of its %d tokens"
                       % (s["rule"], s["window"], len(kls)))
    fills = ""
    if len(sys.argv) > 3:
        chats = [json.loads(ln) for ln in open(sys.argv[3]) if ln.strip()]
        fills = ", %d fill tokens" % check_fills(dist, b, chats, bad)
    print("%d tokens in %d conversations, largest KL difference %.3g, %d oracle picks%s"
          % (checked, len(b["conversations"]), worst, picks, fills))
    for line in bad[:5]:
        print(line)
    sys.exit(1 if bad or not checked else 0)


if __name__ == "__main__":
    main()
