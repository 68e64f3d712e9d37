#!/usr/bin/env bash
# kvchat against llama.cpp on the CPU, side by side (make bench-peer): the same checkpoint (a random
# 124M-shaped one by default, or -m DIR), converted to GGUF by tests/peer/hf_to_gguf.py (f32) and
# llama-quantize (bf16, f16, q8_0), the same thread count, interleaved rounds (kvchat bench, then
# llama-bench, per weight type), medians of the rounds; decode at depth 0 and 512 (llama-bench -d),
# prefill of 128 and 512. Prints one table: tok/s each, the ratio kvchat / llama.cpp (decode as both
# time it: 16 tokens together, the first after the context's prefill included; below it kvchat's
# median single step, the steady state), and the fraction of the machine's read bandwidth (tests/peer/readbw.c, measured before every round; the
# highest, since a shared machine only ever reads slower than it can) each decode figure reaches.
# Needs a llama.cpp checkout with llama-bench and llama-quantize built: LLAMA_CPP=DIR (default
# ../llama.cpp); without it, says so and exits 0.
# Usage: tests/peer/bench_peer.sh [-m DIR] [-t THREADS] [--rounds N] [--types f32,bf16,f16,q8]
set -u
cd "$(dirname "$0")/../.."
LLAMA=${LLAMA_CPP:-../llama.cpp}
KV=build/kvchat
PY=${PYTHON:-python3}
model= threads=$(nproc) rounds=5 types=f32,bf16,f16,q8
while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    *) echo "bench_peer: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
LB=$LLAMA/build/bin/llama-bench LQ=$LLAMA/build/bin/llama-quantize
if [ ! -x "$LB" ] || [ ! -x "$LQ" ]; then
    echo "skip bench-peer: no llama.cpp build at $LLAMA (set LLAMA_CPP=DIR; build llama-bench and llama-quantize there)"
    exit 0
fi
W=${PEER_DIR:-$(mktemp -d)}
[ -n "${PEER_DIR:-}" ] || trap 'rm -rf "$W"' EXIT
mkdir -p "$W"
if [ -z "$model" ]; then
    model=$W/m124
    [ -e "$model/config.json" ] || $KV make-tiny-model "$model" --layers 12 --heads 12 --embd 768 --ctx 1024 >/dev/null || exit 1
fi
. tests/peer/gguf.sh
peer_gguf "$model" "$W" "$types" || exit 1
cc -O3 -march=native -ffast-math -fopenmp -o "$W/readbw" tests/peer/readbw.c || exit 1
commit=$(git -C "$LLAMA" log -1 --format='%h %cs' 2>/dev/null || echo unknown)
# kvchat's prefill is OpenBLAS's GEMM, whose kernels depend on the CPU it detects or OPENBLAS_CORETYPE
core=$(OPENBLAS_VERBOSE=2 $KV --version 2>&1 | sed -n 's/^Core: //p')
echo "kvchat $(git log -1 --format=%h) (OpenBLAS kernels: ${core:-unknown}${OPENBLAS_CORETYPE:+, from OPENBLAS_CORETYPE}) against llama.cpp $commit; $threads threads, $rounds rounds"
bws=
for r in $(seq "$rounds"); do
    bws="$bws $("$W/readbw" "$threads")"
    for t in ${types//,/ }; do
        $KV bench -m "$model" --device cpu --dtype "$t" -t "$threads" --runs 3 --prefill 128,512 --context 0,512 \
            --json "$W/kv-$t-$r.json" >/dev/null 2>>"$W/kv.log" || { echo "kvchat bench $t failed: $(tail -1 "$W/kv.log")"; exit 1; }
        "$LB" -m "$W/$t.gguf" -t "$threads" -p 128,512 -n 16 -d 0,512 -r 3 -o json >"$W/ll-$t-$r.json" 2>>"$W/ll.log" ||
            { echo "llama-bench $t failed: $(tail -1 "$W/ll.log")"; exit 1; }
    done
done
echo "read bandwidth before each round:$bws GB/s"
bw=$(printf '%s\n' $bws | sort -g | tail -1)
"$PY" - "$W" "$types" "$rounds" "$bw" <<'EOF'
import json, statistics, sys
w, types, rounds, bw = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), float(sys.argv[4])
print("%-6s %-13s %22s %22s %22s %22s" % ("", "", "prefill-128", "prefill-512", "decode@0", "decode@512"))
print("%-6s %-13s %22s %22s %22s %22s" % ("weights", "cache (kv)", *(["llama / kvchat (x)"] * 4)))
for t in types:
    kv, ll = {}, {}
    for r in range(1, rounds + 1):
        k = json.load(open("%s/kv-%s-%d.json" % (w, t, r)))["results"][0]
        for key, name in (("prefill128_tok_s", "p128"), ("prefill512_tok_s", "p512"), ("decode_ctx0_tok_s", "d0"),
                          ("decode_ctx512_tok_s", "d512"), ("decode_ctx0_step_tok_s", "s0"),
                          ("decode_ctx512_step_tok_s", "s512")):
            kv.setdefault(name, []).append(k[key])
        kv["bytes"], kv["cache"], kv["per_pos"] = k["weight_bytes_per_token"], k.get("cache_dtype", "?"), k["cache_bytes_per_position"]
        for rec in json.load(open("%s/ll-%s-%d.json" % (w, t, r))):
            if rec["n_prompt"] and rec["n_depth"]:
                continue  # prefill is compared from an empty context
            name = "p%d" % rec["n_prompt"] if rec["n_prompt"] else "d%d" % rec["n_depth"]
            ll.setdefault(name, []).append(rec["avg_ts"])
    cells = []
    for name in ("p128", "p512", "d0", "d512"):
        a, b = statistics.median(ll[name]), statistics.median(kv[name])
        cells.append("%7.1f / %7.1f (%.2f)" % (a, b, b / a))
    print("%-6s %-13s %s" % (t, kv["cache"], " ".join("%22s" % c for c in cells)))
    for name, ctx in (("d0", 0), ("d512", 512)):
        need = (kv["bytes"] + ctx * kv["per_pos"]) / 1e9
        s, a = statistics.median(kv["s%d" % ctx]), statistics.median(ll[name])
        print("%-6s   decode@%-4d kvchat reads %.0f MB a token: %.0f%% of %.1f GB/s; its median single step %.1f tok/s (%.2f)"
              % ("", ctx, need * 1e3, 100 * statistics.median(kv[name]) * need / bw, bw, s, s / a))
EOF
