#!/usr/bin/env bash
# What each weight dtype costs in accuracy against f32 weights: the same model run teacher-forced over
# 256 positions (generate --force-ids, one row of logits per step), then per position the relative
# L2 error of the logits and whether the top token agrees. Prints the median error and the agreement.
# A random 124M-shaped checkpoint by default (no structure for the scales to follow: the hard case),
# or -m DIR. The cache is f32 in every run, so only the weights differ.
# With a llama.cpp build (LLAMA_CPP=DIR, default ../llama.cpp: libllama and llama-quantize), the same
# measurement of llama.cpp's types against its own f32 model, through tests/peer/llama_logits.c on
# the same checkpoint as GGUF, one token a step: like against like (q8 beside llama.cpp's q8_0).
# Usage: tests/peer/accuracy.sh [-m DIR] [--types bf16,f16,q8] [--positions N]
set -u
cd "$(dirname "$0")/../.."
KV=build/kvchat
PY=${PYTHON:-python3}
LLAMA=${LLAMA_CPP:-../llama.cpp}
LQ=$LLAMA/build/bin/llama-quantize
model= types=bf16,f16,q8 positions=256
while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --positions) positions=$2; shift 2 ;;
    *) echo "accuracy: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
if [ -z "$model" ]; then
    model=$W/m124
    $KV make-tiny-model "$model" --layers 12 --heads 12 --embd 768 --ctx 1024 >/dev/null || exit 1
fi
vocab=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json") || exit 1
ids=$("$PY" -c "import random, sys; random.seed(7); print(','.join(str(random.randrange(int(sys.argv[1]))) for _ in range(int(sys.argv[2]))))" "$vocab" "$positions")
for t in f32 ${types//,/ }; do
    $KV generate -m "$model" --dtype "$t" --cache-dtype f32 --prompt-ids "${ids%%,*}" --force-ids "${ids#*,}" \
        -n "$positions" --temp 0 -q --dump-logits "$W/$t.bin" >/dev/null 2>>"$W/log" ||
        { echo "accuracy: the $t run failed: $(tail -1 "$W/log")"; exit 1; }
done
peer=
if [ -x "$LQ" ] && [ -e "$LLAMA/build/bin/libllama.so" ]; then
    . tests/peer/gguf.sh
    cc -O2 -I"$LLAMA/include" -I"$LLAMA/ggml/include" -o "$W/llama_logits" tests/peer/llama_logits.c \
        -L"$LLAMA/build/bin" -lllama -Wl,-rpath,"$LLAMA/build/bin" 2>>"$W/log" && peer_gguf "$model" "$W" "$types" ||
        { echo "accuracy: llama.cpp's side could not be built: $(tail -1 "$W/log")"; exit 1; }
    for t in f32 ${types//,/ }; do
        "$W/llama_logits" "$W/$t.gguf" "$ids" "$W/ll-$t.bin" 2>>"$W/log" ||
            { echo "accuracy: llama.cpp's $t run failed: $(tail -1 "$W/log")"; exit 1; }
    done
    peer="llama.cpp $(git -C "$LLAMA" log -1 --format='%h %cs' 2>/dev/null || echo '(unknown commit)')"
else
    echo "(no llama.cpp build at $LLAMA: kvchat's figures only; set LLAMA_CPP=DIR for llama.cpp's beside them)"
fi
echo "$model, $positions teacher-forced positions, each weight type against f32 weights of the same program (f32 cache)"
"$PY" - "$W" "$types" "$vocab" "$peer" <<'EOF'
import os, sys
import numpy as np
w, types, vocab, peer = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4]
def logits(name):
    return np.fromfile("%s/%s.bin" % (w, name), "<f4").reshape(-1, vocab).astype(np.float64)
def cell(prefix, t):
    a, ref = logits(prefix + t), logits(prefix + "f32")
    e = np.linalg.norm(a - ref, axis=1) / np.linalg.norm(ref, axis=1)
    return "%10.2e %7.1f%%" % (np.median(e), 100 * np.mean(a.argmax(1) == ref.argmax(1)))
print("%-7s %-19s%s" % ("", "kvchat", "   " + peer if peer else ""))
print("%-7s %s" % ("weights", "   ".join(["rel L2 (median) top-1"] * (2 if peer else 1))))
for t in types:
    print("%-7s %s" % (t, "   ".join([cell("", t)] + ([cell("ll-", t)] if peer else []))))
EOF
