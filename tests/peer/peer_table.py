"""bench_peer.sh's tables: for each thread count, kvchat against llama.cpp: tok/s, medians of the
rounds; the ratio, the median of each round's own ratio (the two ran minutes apart at most, where
the shared machine's pace moves between rounds), with the lowest and highest round's below; and each
decode figure as a fraction of the read bandwidth of one thread and of all of them, measured
in the same run (the best of its measurements: a shared machine only ever reads slower than it can).
usage: peer_table.py DIR TYPES ROUNDS "1 THREADS" """
import json
import statistics
import sys

w, types, rounds, tlist = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4].split()
bw = {}
for line in open(w + "/bw"):
    tc, gbs = line.split()
    bw[tc] = max(bw.get(tc, 0.0), float(gbs))
plural = lambda tc: "%s thread%s" % (tc, "" if tc == "1" else "s")
print("read bandwidth (tests/peer/readbw.c): " + ", ".join("%s %.1f GB/s" % (plural(tc), bw[tc]) for tc in tlist))


def medians(t, tc):
    kv, ll = {}, {}
    for r in range(1, rounds + 1):
        k = json.load(open("%s/kv-%s-%s-%d.json" % (w, t, tc, r)))["results"][0]
        for key, name in (("prefill128_tok_s", "p128"), ("prefill512_tok_s", "p512"),
                          ("decode_ctx0_tok_s", "d0"), ("decode_ctx512_tok_s", "d512"),
                          ("decode_ctx0_step_tok_s", "s0"), ("decode_ctx512_step_tok_s", "s512")):
            kv.setdefault(name, []).append(k[key])
        for ctx in (0, 512):  # the first step after the context's prefill, against a steady one
            if "decode_ctx%d_first_ms" % ctx in k:
                kv.setdefault("f%d" % ctx, []).append(
                    k["decode_ctx%d_first_ms" % ctx] * k["decode_ctx%d_step_tok_s" % ctx] / 1e3)
        kv["bytes"], kv["cache"] = k["weight_bytes_per_token"], k.get("cache_dtype", "?")
        kv["per_pos"] = k["cache_bytes_per_position"]
        for rec in json.load(open("%s/ll-%s-%s-%d.json" % (w, t, tc, r))):
            if rec["n_prompt"] and rec["n_depth"]:
                continue  # prefill is compared from an empty context
            name = "p%d" % rec["n_prompt"] if rec["n_prompt"] else "d%d" % rec["n_depth"]
            ll.setdefault(name, []).append(rec["avg_ts"])
            kv["ll_cache"] = rec.get("type_k", "?")
    return kv, ll


for tc in tlist:
    print("\n" + plural(tc))
    print("%-6s %-13s %22s %22s %22s %22s" % ("", "", "prefill-128", "prefill-512", "decode@0", "decode@512"))
    print("%-6s %-13s %22s %22s %22s %22s"
          % ("weights", "cache kv, ll", *(["llama / kvchat (x)"] * 4)))
    for t in types:
        kv, ll = medians(t, tc)
        cells, spread = [], []
        for name in ("p128", "p512", "d0", "d512"):
            x = [b / a for a, b in zip(ll[name], kv[name])]
            cells.append("%7.1f / %7.1f (%.2f)" % (
                statistics.median(ll[name]), statistics.median(kv[name]), statistics.median(x)))
            spread.append("rounds %.2f-%.2f" % (min(x), max(x)))
        caches = kv["cache"] + ", " + kv["ll_cache"]
        print("%-6s %-13s %s" % (t, caches, " ".join("%22s" % c for c in cells)))
        print("%-6s %-13s %s" % ("", "", " ".join("%22s" % c for c in spread)))
        for name, ctx in (("d0", 0), ("d512", 512)):
            need = (kv["bytes"] + ctx * kv["per_pos"]) / 1e9
            s, a = statistics.median(kv["s%d" % ctx]), statistics.median(ll[name])
            frac = lambda gbs: "/".join("%.0f%%" % (100 * gbs / bw[c]) for c in tlist)
            print("%-6s   decode@%-4d %.0f MB a token; of the %s read bandwidth: kvchat %s, llama.cpp %s;"
                  " kvchat's median single step %.1f tok/s (%.2f)"
                  % ("", ctx, need * 1e3, "/".join(plural(c) for c in tlist),
                     frac(statistics.median(kv[name]) * need), frac(a * need), s, s / a)
                  + ("; its first step %.2fx a steady one" % statistics.median(kv["f%d" % ctx])
                     if "f%d" % ctx in kv else ""))
