"""The GPU check's speed table: kvchat's figures (from `kvchat bench --json`) beside the
memory-bandwidth floor, the targets, and Hugging Face transformers on the same GPU.

usage: report.py --verdicts FILE --small B124.json [--large B1558.json] [--basic B124_BASIC.json]
                 [--contexts 0,512,1000] [--prefills 128,768,1024] [--no-targets]
The floor of a decode step is the bytes it must read (every weight once, plus the cached K and V of
every earlier position) over the device's copy bandwidth, measured here with torch. FILE gets one
line a target, "ok NAME: DETAIL" or "FAIL NAME: DETAIL": a missed target, and a figure that is
missing (a bench that failed or was stopped), are failures. With --no-targets (the emulated
device's quick check) the one verdict is that every figure is there.
"""
import argparse
import json
import math
import time

H200_DATASHEET = 4.8e12


def load(path):
    """the first result of a bench --json file, or {} when there is none"""
    try:
        return json.load(open(path))["results"][0] if path else {}
    except (OSError, ValueError, KeyError, IndexError):
        return {}


def copy_bandwidth():
    """(bytes per second, how it was found, whether it was measured)"""
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        return H200_DATASHEET, "the H200 datasheet's: no torch with a GPU here", False
    t = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    u = torch.empty_like(t)
    for _ in range(3):
        u.copy_(t)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        u.copy_(t)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    return 2 * t.numel() * 20 / seconds, "measured device copy, read + write", True


def transformers_rate():
    """tokens/s of transformers' generate on the 124M shape, bf16, by the wall clock; or None"""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024)
    model = transformers.GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 50257, (1, 16), device="cuda")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        t0 = time.time()
        model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
    return 64 / (time.time() - t0)


class Report:
    """the table on stdout and, with targets, one verdict a target in the verdicts file"""

    def __init__(self, verdicts, targets, bw):
        self.verdicts, self.targets, self.bw, self.missing = verdicts, targets, bw, []

    def figure(self, result, key, where):
        v = result.get(key)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            self.missing.append("%s %s" % (where, key))
            return None
        return float(v)

    def judge(self, name, ok, detail):
        if not self.targets:
            return ""
        self.verdicts.write("%s %s: %s\n" % ("ok" if ok else "FAIL", name, detail))
        return ("meets " if ok else "MISSES ") + name

    def decode(self, res, where, ctx, name, target=None):
        """a decode row beside its floor; target: (test of (us, floor us), its name)"""
        rate = self.figure(res, "decode_ctx%d_tok_s" % ctx, where)
        wb = self.figure(res, "weight_bytes_per_token", where)
        cb = self.figure(res, "cache_bytes_per_position", where)
        if rate is None or wb is None or cb is None:
            print("%-44s %12s" % (name, "missing"))
            if target:
                self.judge(target[1], False, "no figure (see the bench's log)")
            return None
        us, floor = 1e6 / rate, (wb + ctx * cb) / self.bw * 1e6
        verdict = ""
        if target:
            verdict = self.judge(target[1], target[0](us, floor),
                                 "%.0f us a token, floor %.0f us" % (us, floor))
        print("%-44s %9.0f us %9.0f us %9.2fx  %s"
              % ("%s (%.0f tok/s)" % (name, rate), us, floor, us / floor, verdict))
        return rate

    def prefill(self, res, where, n, limit):
        what = "one eviction re-prefill (768 tokens)" if n == 768 else "prefill %d tokens" % n
        name = "124M %s < %g ms" % (what, limit or 0)
        rate = self.figure(res, "prefill%d_tok_s" % n, where)
        if rate is None:
            print("%-44s %12s" % (what, "missing"))
            if limit:
                self.judge(name, False, "no figure")
            return
        ms = n / rate * 1e3
        verdict = self.judge(name, ms < limit, "%.2f ms" % ms) if limit else ""
        print("%-44s %9.2f ms %12s %10s  %s" % (what, ms, "", "", verdict))

    def nodes(self, res, where):
        name = "%s graph nodes per decode step <= 5 a layer + 5" % where
        nodes = self.figure(res, "graph_nodes_per_decode_step", where)
        layers = self.figure(res, "layers", where)
        if nodes is None or layers is None:
            self.judge(name, False, "no figure")
            return
        verdict = self.judge(name, nodes <= 5 * layers + 5, "%d for %d layers" % (nodes, layers))
        print("%-44s %12d %12s %10s  %s"
              % ("%s: graph nodes per decode step" % where, nodes, "", "", verdict))

    def peer(self, small):
        name = "124M decode >= 10x transformers generate (wall clock)"
        hf, ours = transformers_rate(), self.figure(small, "decode_ctx0_wall_tok_s", "124M")
        if hf is None or ours is None:
            why = "torch or transformers not found" if hf is None else "kvchat's is missing"
            self.judge(name, False, "no figure: " + why)
            return
        # both by the wall clock, host overheads included
        detail = "%.0f tok/s vs %.0f: %.1fx" % (ours, hf, ours / hf)
        verdict = self.judge(name, ours >= 10 * hf, detail)
        print("%-44s %9.0f tok/s vs kvchat %.0f: %.1fx  %s"
              % ("transformers generate (eager, bf16, 124M)", hf, ours, ours / hf, verdict))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verdicts", required=True)
    ap.add_argument("--small", required=True)
    ap.add_argument("--large")
    ap.add_argument("--basic")
    ap.add_argument("--contexts", default="0,512,1000", help="the contexts bench decoded at")
    ap.add_argument("--prefills", default="128,768,1024", help="the prompt lengths bench timed")
    ap.add_argument("--no-targets", action="store_true")
    a = ap.parse_args()
    contexts = [int(c) for c in a.contexts.split(",")]
    prefills = [int(n) for n in a.prefills.split(",")]
    targets = not a.no_targets
    bw, how, measured = copy_bandwidth() if targets else (H200_DATASHEET, "the H200 datasheet's", 0)
    out = open(a.verdicts, "w")
    r = Report(out, targets, bw)
    small, large, basic = load(a.small), load(a.large), load(a.basic)
    if targets and not measured:
        r.judge("copy bandwidth measured (the floors' figure)", False, how)
    print("copy bandwidth %.2f TB/s (%s); kvchat step times: %s"
          % (bw / 1e12, how, small.get("timing", "?")))
    print()
    title = "124M shape unless named, bf16 weights" if targets else "a tiny model (the quick check)"
    print("%-44s %12s %12s %10s  %s"
          % (title, "kvchat", "floor", "x floor", "target" if targets else ""))
    shape = "124M" if targets else "tiny"
    ctx0 = None
    for ctx in contexts:
        target = None
        if targets and ctx == 512:
            target = (lambda us, f: us < 200, "124M decode at context 512 >= 5000 tok/s (< 200 us)")
        if targets and ctx == 1000:
            target = (lambda us, f: ctx0 is not None and us < 1.1e6 / ctx0,
                      "124M decode at context 1000 within 10% of context 0")
        rate = r.decode(small, shape, ctx, "decode, context %d" % ctx, target)
        ctx0 = rate if ctx == 0 else ctx0
    for n in prefills:
        r.prefill(small, shape, n, {1024: 2.0, 768: 3.0}.get(n) if targets else None)
    if a.large or targets:
        r.decode(large, "1.5B", 0, "1.5B shape: decode, context 0",
                 (lambda us, f: us < 2 * f, "1.5B decode at context 0 within 2x the floor"))
        r.decode(large, "1.5B", 512, "1.5B shape: decode, context 512",
                 (lambda us, f: us <= 1000, "1.5B decode at context 512 <= 1.0 ms"))
    r.nodes(small, shape)
    if a.large or targets:
        r.nodes(large, "1.5B")
    if a.basic:
        print()
        print("%-44s %12s %12s %10s" % ("124M, kernel sets", "basic", "fast", "speedup"))
        for ctx in contexts:
            key = "decode_ctx%d_tok_s" % ctx
            b, f = r.figure(basic, key, "124M basic"), r.figure(small, key, "124M")
            if b and f:
                print("%-44s %9.0f us %9.0f us %9.2fx"
                      % ("decode, context %d" % ctx, 1e6 / b, 1e6 / f, f / b))
    if targets:
        r.peer(small)
    if r.missing:
        print("missing figures: %s" % ", ".join(r.missing))
    if not targets:
        detail = "missing " + ", ".join(r.missing) if r.missing else "all there"
        out.write("%s speed figures: %s\n" % ("FAIL" if r.missing else "ok", detail))
    out.close()


main()
