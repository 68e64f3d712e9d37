#!/usr/bin/env bash
# The recipe of the models kvchat ships (assets/models): the corpus from Debian's packages
# (corpus.py), the two models trained on it (train.py), their files copied into assets/models with
# their checksums, then the bar they must clear (trigram.py) and kvchat perplexity's gates. About
# two hours on two cores (the demo model's 6M tokens at ~850 tokens/s, then the draft's 1.5M at
# ~2,250); a stopped run goes on where it stopped. CI never runs it: it checks the shipped files'
# checksums and kvchat's logits on them (tests/test_reference.sh).
# usage: tests/train/make_models.sh [WORK_DIR]      (default build/train; build/kvchat first)
set -eu
cd "$(dirname "$0")/../.."
W=${1:-build/train}
KV=build/kvchat
PY=/usr/bin/python3
OUT=assets/models
$PY tests/train/corpus.py "$W/corpus" --kvchat "$KV"
$PY tests/train/train.py "$W/corpus" "$W/demo" --layers 4 --embd 128 --heads 4 --ctx 512 \
    --tokens 6e6 --about "A small GPT-2 (4 layers, 7M parameters) trained here on Jane Austen and \
the King James Bible: English words and phrases, not answers."
$PY tests/train/train.py "$W/corpus" "$W/draft" --layers 1 --embd 64 --heads 2 --ctx 512 \
    --tokens 1.5e6 --lr 3e-3 --about "The demo model's draft for speculative decoding (1 layer, \
3.3M parameters): a weaker guesser of the same text, not a chat model."
for m in demo draft; do
    mkdir -p "$OUT/$m"
    for f in config.json model.safetensors vocab.json merges.txt train.log; do
        cp "$W/$m/$f" "$OUT/$m/$f"
    done
done
cp "$W/corpus/corpus.json" "$OUT/corpus.json"
(cd "$OUT" && sha256sum corpus.json */config.json */model.safetensors >SHA256SUMS)
bash tests/train/gates.sh "$W/corpus"
