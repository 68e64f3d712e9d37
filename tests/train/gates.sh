#!/usr/bin/env bash
# The figures a shipped model is judged by (assets/models/README.md records them): held-out
# perplexity under a trigram's on each held-out book (the English gate); copying from far back,
# the repeat and recall gates (kvchat perplexity --repeat, --recall); the loss by position on
# content-balanced windows beside the trigram's, and the attention on position 0 (reported). That
# kvchat's logits on the models equal the float64 NumPy model's is tests/test_reference.sh's.
# usage: tests/train/gates.sh CORPUS_DIR   (corpus.py's output: the held-out texts and chats)
set -eu
cd "$(dirname "$0")/../.."
C=$1
KV=build/kvchat
F32="--dtype f32 --cache-dtype f32 -q"
POS="--ctx 512 --stride 64 --tokens 120000" # each token at 8 positions, every bucket alike
/usr/bin/python3 tests/train/trigram.py "$C" --kvchat "$KV"
/usr/bin/python3 tests/train/trigram.py "$C" --kvchat "$KV" --positions "$C/heldout-austen.txt" \
    $POS
for m in demo draft; do
    for book in austen kjv; do
        echo "== $m on the held-out $book, windows of 512 scoring their last 256"
        "$KV" perplexity -m "assets/models/$m" "$C/heldout-$book.txt" $F32
    done
    echo "== $m: passages of the held-out austen read twice"
    "$KV" perplexity -m "assets/models/$m" "$C/heldout-austen.txt" --repeat $F32
    echo "== $m: the held-out recall chats"
    "$KV" perplexity -m "assets/models/$m" --recall "$C/heldout-recall.jsonl" $F32
    echo "== $m on the held-out austen, every position of windows 64 apart"
    "$KV" perplexity -m "assets/models/$m" "$C/heldout-austen.txt" --positions $POS $F32
done
