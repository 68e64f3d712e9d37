#!/usr/bin/env bash
# make bench-types: what the cache's and the weights' types cost a model, as llama.cpp's users
# judge them: one f32 run (f32 weights, f32 cache) saves its next-token distributions, then each
# cache type (f16, bf16, int8) with f32 weights and each weight type (bf16, f16, q8) with an f32
# cache is measured against it by kvchat perplexity --kl-divergence: perplexity, its change, mean
# and 99th-percentile KL(f32 || type) and top-1 agreement, as one Markdown table. Single-threaded,
# so that a second run prints the same figures. The first row, the f32 run against its own saved
# distributions, is the floor the saved file's f16 rounding sets.
# usage: tests/bench_types.sh KVCHAT MODEL_DIR TEXT [perplexity options, e.g. --tokens 20000]
set -eu
KV=$1 M=$2 TEXT=$3
shift 3
for f in "$M/model.safetensors" "$TEXT"; do
    [ -r "$f" ] || { echo "bench_types.sh: $f: cannot read it" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() { # run WEIGHTS CACHE [options]: kvchat perplexity's summary line ("against ...") or its error
    local w=$1 c=$2
    shift 2
    "$KV" perplexity -m "$M" "$TEXT" -t 1 --dtype "$w" --cache-dtype "$c" -q "$@" "${OPTS[@]}" \
        >"$TMP/out" 2>&1 || { echo "bench_types.sh: $w weights, $c cache: $(tail -1 "$TMP/out")" >&2
        exit 1; }
}
OPTS=("$@")
echo "kvchat bench-types: $("$KV" --version | head -1)"
echo "model  $M ($(sha256sum <"$M/model.safetensors" | cut -c1-16)... model.safetensors)"
echo "text   $TEXT ($(sha256sum <"$TEXT" | cut -c1-16)...)${OPTS[*]:+  options: ${OPTS[*]}}"
run f32 f32 --save-logits "$TMP/base.bin"
sed -n 's/^tokens scored: /tokens scored: /p' "$TMP/out"
echo
echo "| weights | cache | PPL | ΔPPL | mean KL | 99th pct KL | top-1 agreement |"
echo "|---|---|---:|---:|---:|---:|---:|"
for wc in "f32 f32" "f32 f16" "f32 bf16" "f32 int8" "bf16 f32" "f16 f32" "q8 f32"; do
    read -r w c <<<"$wc"
    run "$w" "$c" --kl-divergence "$TMP/base.bin"
    # against FILE: mean KL K  99th percentile P  top-1 agreement T%  PPL A -> B (D)
    sed -n "s/^against .*: mean KL \([^ ]*\)  99th percentile \([^ ]*\)  top-1 agreement \([^ ]*\)"`
        `"  PPL [^ ]* -> \([^ ]*\) (\([^)]*\))$/| $w | $c | \4 | \5 | \1 | \2 | \3 |/p" "$TMP/out"
done
