"""The GPU check's speed table: kvchat's figures (from `kvchat bench --json`) beside the
memory-bandwidth floor, the issue's targets, and Hugging Face transformers on the same GPU.

The floor of a decode step is the bytes it must read (every weight once, plus the cached K and V of
every earlier position) over the device's copy bandwidth, measured here with torch when it is
present (else the H200 datasheet's 4.8 TB/s, said so). Usage: report.py B124.json B1558.json
[B124_BASIC.json] (the last: the 124M shape on the basic kernel set, the previous release's, for the
before/after rows)
"""
import json
import sys
import time


def load(path):
    return json.load(open(path))["results"][0]


def copy_bandwidth():
    try:
        import torch
    except ImportError:
        return 4.8e12, "H200 datasheet, torch not found"
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
    return 2 * t.numel() * 20 / seconds, "measured device copy, read + write"


def transformers_rate():
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
        model.generate(ids, max_new_tokens=256, min_new_tokens=256, do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
    return 256 / (time.time() - t0)


def main():
    small, large = load(sys.argv[1]), load(sys.argv[2])
    bw, how = copy_bandwidth()
    print("copy bandwidth %.2f TB/s (%s); kvchat step times: %s" % (bw / 1e12, how, small.get("timing", "?")))
    print()
    print("%-44s %12s %12s %10s  %s" % ("124M shape unless named, bf16 weights", "kvchat", "floor", "x floor", "target"))

    def decode_row(r, ctx, name, target):
        rate = r["decode_ctx%d_tok_s" % ctx]
        floor = (r["weight_bytes_per_token"] + ctx * r["cache_bytes_per_position"]) / bw
        us = 1e6 / rate
        verdict = target(us, floor * 1e6) if target else ""
        print("%-44s %9.0f us %9.0f us %9.2fx  %s" % (name, us, floor * 1e6, us / (floor * 1e6), verdict))
        return rate

    def meets(ok, text):
        return ("meets " if ok else "MISSES ") + text

    decode_row(small, 0, "decode, context 0 (%.0f tok/s)" % small["decode_ctx0_tok_s"], None)
    decode_row(small, 512, "decode, context 512 (%.0f tok/s)" % small["decode_ctx512_tok_s"],
               lambda us, f: meets(us < 200, ">= 5000 tok/s (< 200 us)"))
    decode_row(small, 1000, "decode, context 1000 (%.0f tok/s)" % small["decode_ctx1000_tok_s"],
               lambda us, f: meets(us < 1.1e6 / small["decode_ctx0_tok_s"], "within 10% of context 0"))
    for n, target in ((128, None), (1024, 2.0)):
        ms = n / small["prefill%d_tok_s" % n] * 1e3
        print("%-44s %9.2f ms %12s %10s  %s" % ("prefill %d tokens" % n, ms, "", "",
                                                meets(ms < target, "< %g ms" % target) if target else ""))
    ms = 768 / small["prefill768_tok_s"] * 1e3
    print("%-44s %9.2f ms %12s %10s  %s" % ("one eviction re-prefill (768 tokens)", ms, "", "", meets(ms < 3, "< 3 ms")))
    decode_row(large, 0, "1.5B shape: decode, context 0 (%.0f tok/s)" % large["decode_ctx0_tok_s"],
               lambda us, f: meets(us < 2 * f, "within 2x the floor"))
    decode_row(large, 512, "1.5B shape: decode, context 512 (%.0f tok/s)" % large["decode_ctx512_tok_s"],
               lambda us, f: meets(us <= 1000, "<= 1.0 ms"))
    print("%-44s %12s  %s" % ("graph nodes per decode step (124M, 1.5B)", "%s, %s" % (
        small.get("graph_nodes_per_decode_step", "?"), large.get("graph_nodes_per_decode_step", "?")),
        "at most 5 a layer + 5"))
    if len(sys.argv) > 3:
        basic = load(sys.argv[3])
        print()
        print("%-44s %12s %12s %10s" % ("124M bf16, kernel sets", "basic", "fast", "speedup"))
        for ctx in (0, 512, 1000):
            key = "decode_ctx%d_tok_s" % ctx
            print("%-44s %9.0f us %9.0f us %9.2fx" % ("decode, context %d" % ctx, 1e6 / basic[key], 1e6 / small[key],
                                                    small[key] / basic[key]))
        print("%-44s %12s %12s" % ("graph nodes per decode step", basic.get("graph_nodes_per_decode_step", "?"),
                                   small.get("graph_nodes_per_decode_step", "?")))
    hf = transformers_rate()
    if hf is None:
        print("transformers: torch or transformers not found, no peer figure")
    else:
        ours = small["decode_ctx0_wall_tok_s"]  # both by the wall clock, host overheads included
        print("%-44s %9.0f tok/s vs kvchat %.0f: %.1fx  %s" % ("transformers generate (eager, bf16, 124M)", hf, ours,
                                                              ours / hf, meets(ours >= 10 * hf, ">= 10x")))
    print("kvchat decode at context 0 by the wall clock: %.0f tok/s (device time: %.0f)"
          % (small["decode_ctx0_wall_tok_s"], small["decode_ctx0_tok_s"]))


main()
