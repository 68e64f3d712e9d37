#!/usr/bin/env bash
# What each weight type and each cache type costs, on a model that reads English: kvchat perplexity
# over the same held-out text with f32 weights and an f32 cache as the base (--save-logits), then
# each other type against it (--kl-divergence): PPL, its change, mean and 99th-percentile KL, top-1
# agreement. Prints one markdown table (the README's).
# Usage: tests/peer/quality.sh [-m DIR] [--text FILE] [--tokens N]
#   defaults: the shipped demo model, build/train/corpus/heldout-austen.txt (Persuasion, never
#   trained on: tests/train/corpus.py makes it), its first 8,192 scored tokens
set -u
cd "$(dirname "$0")/../.."
KV=build/kvchat
model=assets/models/demo text=build/train/corpus/heldout-austen.txt tokens=8192
while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    --text) text=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    *) echo "quality: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
if [ ! -r "$text" ]; then
    echo "quality: cannot read $text (tests/train/corpus.py makes the held-out text)" >&2
    exit 1
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ppl() { # ppl WEIGHTS CACHE [perplexity options]: the run's stdout in $W/out
    local w=$1 c=$2
    shift 2
    "$KV" perplexity -m "$model" "$text" --dtype "$w" --cache-dtype "$c" --tokens "$tokens" -q \
        "$@" >"$W/out" 2>"$W/err" && return
    echo "quality: --dtype $w --cache-dtype $c: $(tail -1 "$W/err")" >&2
    exit 1
}
ppl f32 f32 --save-logits "$W/base.bin"
base=$(sed -n 's/^perplexity: \([0-9.]*\).*/\1/p' "$W/out")
echo "kvchat perplexity -m $model $text --tokens $tokens: f32 weights and cache, PPL $base"
echo
echo "| weights | cache | PPL | ΔPPL | mean KL | KL p99 | top-1 agreement |"
echo "|---|---|---:|---:|---:|---:|---:|"
for cfg in "f32 f32" "bf16 f32" "f16 f32" "q8 f32" "q4 f32" "f32 f16" "f32 bf16" "f32 int8" \
    "f32 q4" "q8 int8" "q4 q4"; do
    set -- $cfg
    ppl "$1" "$2" --kl-divergence "$W/base.bin"
    # "against FILE: mean KL K  99th percentile P  top-1 agreement A  PPL B -> R (D)"
    awk '/^against / { d = $16; gsub(/[()]/, "", d); print $5, $8, $11, $15, d }' "$W/out" |
        { read -r kl p99 top1 p dp && echo "| $1 | $2 | $p | $dp | $kl | $p99 | $top1 |"; }
done
