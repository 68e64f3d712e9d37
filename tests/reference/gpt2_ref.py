#!/usr/bin/python3
"""Independent float64 NumPy GPT-2: reads a Hugging Face checkpoint directory (safetensors parsed
here, not by kvchat) and prints or saves logits, or greedy-decodes. The oracle for the C forward pass.

usage: gpt2_ref.py DIR logits IDS OUT.npy      last position's logits for the comma-separated ids
       gpt2_ref.py DIR greedy IDS N            N greedy tokens after the ids, printed space-separated
With ROUND=bf16 or ROUND=f16 in the environment, the weight matrices are first rounded to that type
(nearest even), as kvchat's --dtype does when it converts an f32 checkpoint; with bf16 the inputs of
every matrix product are rounded to bf16 too, as kvchat's bf16 products do. ROUND=q8 is kvchat's (and
llama.cpp's q8_0) definition: the matrices but the position embedding in blocks of 32 along the
reduction, int8 values and an f16 scale (the largest magnitude / 127), each product's input quantised
the same way with an f32 scale; ROUND=q8w quantises the weights only, the products taking exact
inputs: what the weight format alone costs. ROUND=q4 (and q4w) is llama.cpp's q4_0 for the blocks'
four matrices, in its float32 operations, the token embedding in kvchat's 6-bit blocks (q4_0's rule
with d = m / -32 and q = min(63, trunc(x * (1 / d) + 32.5))).
A bf16-rounded input within 3e-6 (relative) of a rounding midpoint is a near-tie: kvchat's f32
arithmetic may land it on the other side, one bf16 step away, which in a tiny random model moves the
logits by up to ~3e-3. Each ROUND=bf16 run prints on stderr how many near-ties it met ("near-ties N");
FLIP=i[,j] rounds the i-th (and j-th) of them the other way, counted in the order the computation
meets them, so a caller can tell near-ties from a wrong kernel.
"""
import os
import json
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = data[base + b:base + en]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif e["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        else:
            continue
        out[name.removeprefix("transformer.")] = a.reshape(e["shape"])
    return out


def q8_blocks(a, scale=lambda d: d):
    """a's last axis in blocks of 32 as q8 values times their block's scale (halves away from zero)"""
    b = a.reshape(a.shape[:-1] + (a.shape[-1] // 32, 32))
    d = np.abs(b).max(-1, keepdims=True).astype(np.float32) / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    x = (b.astype(np.float32) * inv).astype(np.float64)  # the product in f32, as kvchat forms it
    q = np.sign(x) * np.floor(np.abs(x) + 0.5)
    return (q * scale(d).astype(np.float64)).reshape(a.shape)


def q4_blocks(a, half=8):
    """a's last axis in blocks of 32 as q4_0 values (q - 8) times their block's f16 scale: m the
    first value of largest magnitude, d = m / -8, q = min(15, trunc(x * (1 / d) + 8.5)) in f32;
    half=32 is the 6-bit blocks' rule (d = m / -32, q = min(63, trunc(x * (1 / d) + 32.5)))"""
    b = a.reshape(a.shape[:-1] + (a.shape[-1] // 32, 32)).astype(np.float32)
    m = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)
    d = (m / np.float32(-half)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    t = (b * inv).astype(np.float32) + np.float32(half + 0.5)
    q = np.minimum(2 * half - 1, np.trunc(t)).astype(np.float64) - half
    return (q * d.astype(np.float16).astype(np.float64)).reshape(a.shape)


def round_to(a, kind):
    if kind == "f16":
        return a.astype(np.float32).astype(np.float16).astype(np.float64)
    if kind == "bf16":
        u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    return a


MATRICES = ("wte.weight", "wpe.weight", "attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


TIE_BAND = 3e-6
FLIP = {int(i) for i in os.environ.get("FLIP", "").split(",") if i}


class GPT2:
    def __init__(self, d):
        self.near_ties = 0
        cfg = json.load(open(d + "/config.json"))
        self.L, self.H, self.C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
        self.eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.w = load_safetensors(d + "/model.safetensors")
        kind = os.environ.get("ROUND", "")
        self.act = "q8" if kind in ("q8", "q4") else kind if kind == "bf16" else ""
        for k in self.w:
            if kind in ("q8", "q8w", "q4", "q4w"):
                if k.endswith(MATRICES) and k != "wpe.weight":
                    w = self.w[k] if k == "wte.weight" else self.w[k].T  # reduction along the last axis
                    if kind.startswith("q4"):
                        w = q4_blocks(w, 32 if k == "wte.weight" else 8)
                    else:
                        w = q8_blocks(w, lambda d: d.astype(np.float16))
                    self.w[k] = w if k == "wte.weight" else w.T
            elif k.endswith(MATRICES):
                self.w[k] = round_to(self.w[k], kind)

    def ln(self, x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[p + ".weight"] + self.w[p + ".bias"]

    def mm(self, x, w):
        if self.act == "q8":
            return q8_blocks(x) @ w
        r = round_to(x, self.act)
        if self.act == "bf16":
            lo, hi = round_to(x * (1 - TIE_BAND), "bf16"), round_to(x * (1 + TIE_BAND), "bf16")
            for idx in zip(*np.nonzero(lo != hi)):
                if self.near_ties in FLIP:
                    r[idx] = lo[idx] if r[idx] == hi[idx] else hi[idx]
                self.near_ties += 1
        return r @ w

    def logits(self, ids, reading=None, last=False):
        """Logits of every position (last: of the last one only), no cache: the whole sequence at
        once. reading: a list that gets, layer by layer, the last position's attention weights
        [heads, positions]."""
        w, C, H = self.w, self.C, self.H
        T, hd = len(ids), C // H
        x = w["wte.weight"][ids] + w["wpe.weight"][:T]
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for l in range(self.L):
            p = "h.%d." % l
            qkv = self.mm(self.ln(x, p + "ln_1"), w[p + "attn.c_attn.weight"]) + w[p + "attn.c_attn.bias"]
            q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(T, H, hd).transpose(1, 0, 2) for i in range(3))
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            if reading is not None:
                reading.append(s[:, -1, :])
            y = (s @ v).transpose(1, 0, 2).reshape(T, C)
            x = x + self.mm(y, w[p + "attn.c_proj.weight"]) + w[p + "attn.c_proj.bias"]
            h = self.mm(self.ln(x, p + "ln_2"), w[p + "mlp.c_fc.weight"]) + w[p + "mlp.c_fc.bias"]
            h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
            x = x + self.mm(h, w[p + "mlp.c_proj.weight"]) + w[p + "mlp.c_proj.bias"]
        return self.mm(self.ln(x[-1:] if last else x, "ln_f"), w["wte.weight"].T)


def main():
    d, mode, ids = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
    m = GPT2(d)
    if mode == "logits":
        np.save(sys.argv[4], m.logits(ids)[-1])
    elif mode == "greedy":
        out = []
        for _ in range(int(sys.argv[4])):
            nxt = int(np.argmax(m.logits(ids + out)[-1]))
            out.append(nxt)
        print(" ".join(map(str, out)))
    else:
        sys.exit("unknown mode " + mode)
    if m.act == "bf16":
        sys.stderr.write("near-ties %d\n" % m.near_ties)


if __name__ == "__main__":
    main()
