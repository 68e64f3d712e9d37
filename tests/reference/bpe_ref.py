#!/usr/bin/python3
"""Independent GPT-2 encoder: OpenAI's published algorithm (the `regex` module's \\p classes, the
byte-to-unicode table, the naive lowest-rank merge loop). Reads UTF-8 bytes from a file (invalid bytes
replaced as Python's errors="replace" does, kvchat's documented behaviour) and prints the ids.

usage: bpe_ref.py VOCAB MERGES FILE [FILE...]   one line of ids per file
"""
import json
import sys

import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def pieces(vocab_path):
    """each id's bytes, as the vocabulary at vocab_path spells them"""
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    vocab = json.load(open(vocab_path, encoding="utf-8"))
    return {i: bytes(byte_of[c] for c in s) for s, i in vocab.items()}


def main():
    enc = json.load(open(sys.argv[1], encoding="utf-8"))
    lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[1:]
    ranks = {tuple(l.split()): i for i, l in enumerate(lines) if l}
    b2u = bytes_to_unicode()

    def bpe(token):
        word = list(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
            if best not in ranks:
                break
            first, second = best
            new, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = new
        return word

    for path in sys.argv[3:]:
        text = open(path, "rb").read().decode("utf-8", errors="replace")
        ids = []
        for tok in PAT.findall(text):
            ids.extend(enc[p] for p in bpe("".join(b2u[b] for b in tok.encode("utf-8"))))
        print(" ".join(map(str, ids)))


if __name__ == "__main__":
    main()
