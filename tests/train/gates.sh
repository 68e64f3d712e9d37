#!/usr/bin/env bash
# The gates a shipped model must pass (assets/models/README.md records their figures): held-out
# perplexity under a trigram's on each held-out book, the loss at positions 200-255 at least 0.3
# nats under that at 0-31, and the attention on position 0 reported. (That kvchat's logits on the
# models equal the float64 NumPy model's is tests/test_reference.sh's, run by make test.)
# usage: tests/train/gates.sh CORPUS_DIR   (corpus.py's output: the held-out books)
set -eu
cd "$(dirname "$0")/../.."
C=$1
KV=build/kvchat
/usr/bin/python3 tests/train/trigram.py "$C" --kvchat "$KV"
for m in demo draft; do
    for book in austen kjv; do
        echo "== $m on the held-out $book, windows of 512 scoring their last 256"
        "$KV" perplexity -m "assets/models/$m" "$C/heldout-$book.txt" --dtype f32 \
            --cache-dtype f32 -q
    done
    echo "== $m on the held-out austen, every position of side-by-side windows of 512"
    "$KV" perplexity -m "assets/models/$m" "$C/heldout-austen.txt" --dtype f32 --cache-dtype f32 \
        --positions -q
done
