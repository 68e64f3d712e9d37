#!/usr/bin/env bash
# What each weight dtype costs in accuracy against f32 weights: the same model run teacher-forced over
# 256 positions (generate --force-ids, one row of logits per step), then per position the relative
# L2 error of the logits and whether the top token agrees. Prints the median error and the agreement.
# A random 124M-shaped checkpoint by default (no structure for the scales to follow: the hard case),
# or -m DIR. The cache is f32 in every run, so only the weights differ.
# Usage: tests/peer/accuracy.sh [-m DIR] [--types bf16,f16,q8] [--positions N]
set -u
cd "$(dirname "$0")/../.."
KV=build/kvchat
PY=${PYTHON:-python3}
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
echo "$model, $positions teacher-forced positions, against f32 weights (f32 cache)"
"$PY" - "$W" "$types" "$vocab" <<'EOF'
import sys
import numpy as np
w, types, vocab = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
ref = np.fromfile(w + "/f32.bin", "<f4").reshape(-1, vocab).astype(np.float64)
print("%-6s %22s %14s" % ("weights", "median rel L2 error", "top-1 agrees"))
for t in types:
    a = np.fromfile("%s/%s.bin" % (w, t), "<f4").reshape(-1, vocab).astype(np.float64)
    e = np.linalg.norm(a - ref, axis=1) / np.linalg.norm(ref, axis=1)
    print("%-6s %22.2e %13.1f%%" % (t, np.median(e), 100 * np.mean(a.argmax(1) == ref.argmax(1))))
EOF
