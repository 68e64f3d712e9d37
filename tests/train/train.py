#!/usr/bin/env python3
"""Trains a GPT-2 exactly as Hugging Face defines it (learned positions, pre-norm blocks, tanh
GELU, tied embeddings) on corpus.py's train.u16, and writes what kvchat loads: config.json and
model.safetensors (f16), beside train.log. Resumable (OUT/train.pt), seeded, niced.

usage: train.py CORPUS_DIR OUT_DIR [--layers L --embd D --heads H --ctx T] [--tokens N]
                [--batch B] [--lr LR] [--seed S] [--threads N] [--about TEXT]
--about goes into config.json as kvchat_about: the chat shows it above the conversation. With
--finish, only config.json and model.safetensors are written again from the last checkpoint; with
--snapshot DIR, the last checkpoint of a run still going is written into DIR as a model kvchat
loads, to measure it early (the run is left as it is)."""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

VOCAB, EOT = 50257, 50256


class Head(torch.autograd.Function):
    """The tied LM head and its cross-entropy, `chunk` rows at a time into one buffer kept from
    step to step: a whole batch's logits (rows x 50257 floats, hundreds of MB) are never held,
    and no step faults in fresh pages for them (most of a naive step's time). The gradients are
    made in the forward pass, where each chunk's softmax is at hand; one softmax pass, in place."""

    buffers = {}

    @staticmethod
    def forward(ctx, h, w, y, chunk):
        buf = Head.buffers.setdefault(chunk, torch.empty(chunk, w.shape[0]))
        loss = torch.zeros((), dtype=torch.float64)
        gh, gw = torch.empty_like(h), torch.zeros_like(w)
        for i in range(0, h.shape[0], chunk):
            hc, yc = h[i : i + chunk], y[i : i + chunk]
            p = buf[: len(yc)]
            torch.mm(hc, w.t(), out=p)
            picked = p.gather(1, yc[:, None])
            top = p.max(1, keepdim=True).values
            p.sub_(top).exp_()
            total = p.sum(1, keepdim=True)
            loss += (total.log() + top - picked).double().sum()
            p.div_(total)
            p[torch.arange(len(yc)), yc] -= 1
            torch.mm(p, w, out=gh[i : i + chunk])
            gw.addmm_(p.t(), hc)
        n = h.shape[0]
        ctx.save_for_backward(gh / n, gw / n)
        return (loss / n).float()

    @staticmethod
    def backward(ctx, g):
        gh, gw = ctx.saved_tensors
        return gh * g, gw * g, None, None


class GPT2(torch.nn.Module):
    def __init__(self, L, D, H, T):
        super().__init__()
        self.L, self.D, self.H, self.T = L, D, H, T
        P = torch.nn.Parameter
        self.wte = P(torch.randn(VOCAB, D) * 0.02)
        self.wpe = P(torch.randn(T, D) * 0.01)
        proj = 0.02 / math.sqrt(2 * L)  # GPT-2's scaling of the residual projections
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln_1_w, b.ln_1_b = P(torch.ones(D)), P(torch.zeros(D))
            b.attn_w, b.attn_b = P(torch.randn(D, 3 * D) * 0.02), P(torch.zeros(3 * D))
            b.proj_w, b.proj_b = P(torch.randn(D, D) * proj), P(torch.zeros(D))
            b.ln_2_w, b.ln_2_b = P(torch.ones(D)), P(torch.zeros(D))
            b.fc_w, b.fc_b = P(torch.randn(D, 4 * D) * 0.02), P(torch.zeros(4 * D))
            b.fc2_w, b.fc2_b = P(torch.randn(4 * D, D) * proj), P(torch.zeros(D))
            self.blocks.append(b)
        self.ln_f_w, self.ln_f_b = P(torch.ones(D)), P(torch.zeros(D))
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

    def hidden(self, x):
        B, T = x.shape
        h = self.wte[x] + self.wpe[:T]
        hd = self.D // self.H
        for b in self.blocks:
            a = F.layer_norm(h, (self.D,), b.ln_1_w, b.ln_1_b, 1e-5) @ b.attn_w + b.attn_b
            q, k, v = (t.view(B, T, self.H, hd).transpose(1, 2) for t in a.split(self.D, 2))
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + self.mask[:T, :T]
            o = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, self.D)
            h = h + o @ b.proj_w + b.proj_b
            m = F.layer_norm(h, (self.D,), b.ln_2_w, b.ln_2_b, 1e-5) @ b.fc_w + b.fc_b
            h = h + F.gelu(m, approximate="tanh") @ b.fc2_w + b.fc2_b
        return F.layer_norm(h, (self.D,), self.ln_f_w, self.ln_f_b, 1e-5)

    def loss(self, x, y, chunk=512):
        h = self.hidden(x)
        return Head.apply(h.reshape(-1, self.D), self.wte, y.reshape(-1), chunk)

    def tensors(self):
        """Hugging Face's names (GPT2Model's, as the hub's gpt2 stores them) and shapes"""
        out = {"wte.weight": self.wte, "wpe.weight": self.wpe}
        for i, b in enumerate(self.blocks):
            for name, t in [("ln_1.weight", b.ln_1_w), ("ln_1.bias", b.ln_1_b),
                            ("attn.c_attn.weight", b.attn_w), ("attn.c_attn.bias", b.attn_b),
                            ("attn.c_proj.weight", b.proj_w), ("attn.c_proj.bias", b.proj_b),
                            ("ln_2.weight", b.ln_2_w), ("ln_2.bias", b.ln_2_b),
                            ("mlp.c_fc.weight", b.fc_w), ("mlp.c_fc.bias", b.fc_b),
                            ("mlp.c_proj.weight", b.fc2_w), ("mlp.c_proj.bias", b.fc2_b)]:
                out["h.%d.%s" % (i, name)] = t
        out["ln_f.weight"], out["ln_f.bias"] = self.ln_f_w, self.ln_f_b
        return out


def write_safetensors(path, tensors):
    """f16, in the format's layout: an 8-byte header length, the JSON header, the data"""
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().to(torch.float16).contiguous().numpy()
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        blobs.append(a.tobytes())
        at += a.nbytes
    meta = json.dumps(header, separators=(",", ":")).encode()
    meta += b" " * (-len(meta) % 8)
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(meta)) + meta)
        for b in blobs:
            f.write(b)
    os.replace(path + ".part", path)


def write_config(path, a):
    cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
           "bos_token_id": EOT, "eos_token_id": EOT, "layer_norm_epsilon": 1e-5,
           "model_type": "gpt2", "n_ctx": a.ctx, "n_embd": a.embd, "n_head": a.heads,
           "n_layer": a.layers, "n_positions": a.ctx, "vocab_size": VOCAB,
           "tie_word_embeddings": True}
    if a.about:
        cfg["kvchat_about"] = a.about
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def within_documents(starts, ends, ctx, n):
    """Each window moved inside the document it starts in (its <|endoftext|> the last token it may
    predict), where that document is at least a window long (a novel, a book of the Bible), so
    that all it reads is one text; shorter ones (chats, quotations) run on into the next as
    before. Every place a window may start in such a document is as likely as every other."""
    out = starts.copy()
    for i, p in enumerate(starts):
        d = np.searchsorted(ends, p)  # the document p is in, its end included
        lo, hi = (ends[d - 1] + 1 if d else 0), (ends[d] if d < len(ends) else n)
        if hi - lo >= ctx:
            out[i] = lo + (p - lo) * (hi - lo - ctx + 1) // (hi - lo + 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--tokens", type=float, default=4e6, help="tokens to train on, all told")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--about", default="", help="what the model is, for kvchat's screen")
    ap.add_argument("--finish", action="store_true", help="only write the model files again")
    ap.add_argument("--snapshot", metavar="DIR", help="the last checkpoint as a model, into DIR")
    a = ap.parse_args()
    os.nice(10)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    data = np.fromfile(os.path.join(a.corpus, "train.u16"), dtype=np.uint16).astype(np.int64)
    ends = np.flatnonzero(data == EOT)  # where each document ends
    model = GPT2(a.layers, a.embd, a.heads, a.ctx)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    per_step = a.batch * a.ctx
    steps = int(a.tokens // per_step)
    warm = max(1, steps // 50)
    step, ckpt = 0, os.path.join(a.out, "train.pt")
    rng = np.random.default_rng(a.seed)
    if os.path.exists(ckpt):  # resume where the last run stopped, its data order included
        st = torch.load(ckpt)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, rng.bit_generator.state = st["step"], st["rng"]
        print("resumed at step %d of %d" % (step, steps), file=sys.stderr)
    if step and not a.snapshot:
        with open(os.path.join(a.out, "train.log"), "a") as log:
            print("# resumed at step %d of %d: %s" % (step, steps, " ".join(sys.argv[1:])),
                  file=log)
    if a.finish and step < steps:
        sys.exit("%s: at step %d of %d, not finished" % (ckpt, step, steps))
    if a.snapshot:
        write_model(a.snapshot, a, model)
        print("%s: step %d of %d" % (a.snapshot, step, steps), file=sys.stderr)
        return
    log = open(os.path.join(a.out, "train.log"), "a")
    if step == 0 or a.finish:
        print("# %s" % " ".join(sys.argv[1:]), file=log)
    if step == 0:
        print("# %d parameters, %d steps of %d tokens" % (
            sum(p.numel() for p in model.parameters()), steps, per_step), file=log)
    t0, seen0 = time.time(), step
    while step < steps:
        lr = a.lr * min(1, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = max(lr, a.lr * 0.02)
        starts = within_documents(rng.integers(0, len(data) - a.ctx - 1, a.batch), ends, a.ctx,
                                  len(data))
        xy = torch.from_numpy(np.stack([data[s : s + a.ctx + 1] for s in starts]))
        loss = model.loss(xy[:, :-1], xy[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        rate = (step - seen0) * per_step / (time.time() - t0)
        line = "step %d/%d  loss %.4f  lr %.2e  %.0f tok/s  eta %.0f min" % (
            step, steps, loss.item(), lr, rate, (steps - step) * per_step / rate / 60)
        print("\r" + line, end="", file=sys.stderr, flush=True)
        print(line, file=log, flush=True)
        if step % 100 == 0 or step == steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "rng": rng.bit_generator.state}, ckpt + ".part")
            os.replace(ckpt + ".part", ckpt)
    print(file=sys.stderr)
    write_model(a.out, a, model)


def write_model(out, a, model):
    os.makedirs(out, exist_ok=True)
    write_config(os.path.join(out, "config.json"), a)
    write_safetensors(os.path.join(out, "model.safetensors"), model.tensors())
    assets = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "assets")
    for name in ("vocab.json", "merges.txt"):  # GPT-2's tokenizer, as kvchat ships it
        shutil.copyfile(os.path.join(assets, name), os.path.join(out, name))


if __name__ == "__main__":
    main()
