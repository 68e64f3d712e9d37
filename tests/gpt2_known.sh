#!/usr/bin/env bash
# The known greedy continuation of real GPT-2 124M (from transformers' own tests): ids [464, 3290]
# ("The dog") continue as below, on every weight dtype. Needs the real weights: make test-gpt2
# MODEL=DIR, or the default download location. Skips (exit 0) when they are absent.
set -u
KV=${1:-build/kvchat}
DIR=${2:-}
[ -n "$DIR" ] || DIR=${KVCHAT_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/models/gpt2}
WANT="373 1043 287 257 2214 1474 262 16246 286 2688 290 2688 27262 13 198 198 464 3290"
if [ ! -s "$DIR/model.safetensors" ]; then
    echo "skip gpt2/known continuation: no GPT-2 weights in $DIR (kvchat get-model gpt2)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
pass=0 fail=0
for dt in f32 bf16 f16; do
    got=$("$KV" generate -m "$DIR" --dtype "$dt" --prompt-ids 464,3290 -n 18 --temp 0 --repeat-penalty 1 -q --output ids)
    if [ "$got" == "$WANT" ]; then
        echo "ok   gpt2/known continuation ($dt)"
        pass=$((pass + 1))
    else
        echo "FAIL gpt2/known continuation ($dt): got $got"
        fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
