#!/usr/bin/env bash
# kvchat against llama.cpp on the CPU, side by side (make bench-peer): the same checkpoint (a
# random 124M-shaped one by default, or -m DIR), converted to GGUF by tests/peer/hf_to_gguf.py
# (f32) and llama-quantize (bf16, f16, q8_0, q4_0), the same thread count, interleaved rounds
# (kvchat
# bench and llama-bench per weight type, which first alternating), medians of the rounds; decode
# at depth 0 and 512 (llama-bench -d), prefill of 128 and 512; with one thread and with THREADS
# (default: every core), a table each (tests/peer/peer_table.py): tok/s each, the ratio kvchat /
# llama.cpp, the median of the rounds' own ratios (decode as both time it: 16 tokens together, the
# first after the context's prefill included; below it kvchat's median single step, the steady
# state), and each decode figure's fraction of the read bandwidth of one thread and of THREADS
# (tests/peer/readbw.c, measured before every round; the highest, since a shared machine only ever
# reads slower than it can). Both keep an f16 cache, with f32 weights too (llama-bench has no f32
# cache), so that both read the same bytes; the type q4kv is q4 weights with a q4 cache on both
# (llama-bench -ctk q4_0 -ctv q4_0, with its flash attention, which a quantised V cache needs).
# First, without llama.cpp, build/matvec_bw's pace per core.
# Needs a llama.cpp checkout with llama-bench and llama-quantize built: LLAMA_CPP=DIR (default
# ../llama.cpp); without it, says so and exits 0.
# Usage: tests/peer/bench_peer.sh [-m DIR] [-t THREADS] [--rounds N]
#                                 [--types f32,bf16,f16,q8,q4,q4kv]
set -u
cd "$(dirname "$0")/../.."
LLAMA=${LLAMA_CPP:-../llama.cpp}
KV=build/kvchat
PY=${PYTHON:-/usr/bin/python3} # Debian's, with NumPy
model= threads=$(nproc) rounds=5 types=f32,bf16,f16,q8,q4,q4kv
while [ $# -gt 0 ]; do
    case $1 in
    -m) model=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    *) echo "bench_peer: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
    esac
done
# what one core does per byte, which needs no llama.cpp: the decode product against a plain read of
# the same bytes, from memory and from L2 (tests/peer/matvec_bw.c)
if [ -x build/matvec_bw ]; then
    build/matvec_bw 1
    [ "$threads" -gt 1 ] && build/matvec_bw "$threads"
fi
LB=$LLAMA/build/bin/llama-bench LQ=$LLAMA/build/bin/llama-quantize
if [ ! -x "$LB" ] || [ ! -x "$LQ" ]; then
    echo "skip bench-peer: no llama.cpp build at $LLAMA" \
        "(set LLAMA_CPP=DIR; build llama-bench and llama-quantize there)"
    exit 0
fi
W=${PEER_DIR:-$(mktemp -d)}
[ -n "${PEER_DIR:-}" ] || trap 'rm -rf "$W"' EXIT
mkdir -p "$W"
if [ -z "$model" ]; then
    model=$W/m124
    [ -e "$model/config.json" ] || $KV make-tiny-model "$model" --layers 12 --heads 12 --embd 768 \
        --ctx 1024 >/dev/null || exit 1
fi
. tests/peer/gguf.sh
peer_gguf "$model" "$W" "${types//q4kv/q4}" || exit 1
cc -O3 -march=native -ffast-math -fopenmp -o "$W/readbw" tests/peer/readbw.c || exit 1
commit=$(git -C "$LLAMA" log -1 --format='%h %cs' 2>/dev/null || echo unknown)
# kvchat's f32 prefill is OpenBLAS's GEMM, whose kernels depend on the CPU it detects or
# OPENBLAS_CORETYPE
core=$(OPENBLAS_VERBOSE=2 $KV --version 2>&1 | sed -n 's/^Core: //p')
# one thread and the thread count asked for (all the cores by default): a table each
tlist=1
[ "$threads" -gt 1 ] && tlist="1 $threads"
echo "kvchat $(git log -1 --format=%h) (OpenBLAS kernels:" \
    "${core:-unknown}${OPENBLAS_CORETYPE:+, from OPENBLAS_CORETYPE}) against llama.cpp $commit;" \
    "threads: $tlist; $rounds rounds"
: >"$W/bw"
for r in $(seq "$rounds"); do
    for tc in $tlist; do
        echo "$tc $("$W/readbw" "$tc")" >>"$W/bw"
        for t in ${types//,/ }; do
            # odd rounds run kvchat first, even ones llama.cpp: neither always meets a fresher
            # machine
            # the weights' type and each side's cache
            wt=${t%kv} kc=f16 lc=()
            [ "$t" = q4kv ] && kc=q4 lc=(-ctk q4_0 -ctv q4_0 -fa 1)
            for who in $( ((r % 2)) && echo kv ll || echo ll kv); do
                if [ "$who" = kv ]; then
                    # llama-bench keeps no f32 cache: kvchat keeps f16 with f32 weights too, so
                    # that both read the same bytes (its default there: the exact path's f32)
                    $KV bench -m "$model" --device cpu --dtype "$wt" --cache-dtype $kc -t "$tc" \
                        --runs 3 --prefill 128,512 --context 0,512 --json "$W/kv-$t-$tc-$r.json" \
                        >/dev/null 2>>"$W/kv.log" ||
                        { echo "kvchat bench $t failed: $(tail -1 "$W/kv.log")"; exit 1; }
                else
                    "$LB" -m "$W/$wt.gguf" -t "$tc" -p 128,512 -n 16 -d 0,512 -r 3 "${lc[@]}" \
                        -o json \
                        >"$W/ll-$t-$tc-$r.json" 2>>"$W/ll.log" ||
                        { echo "llama-bench $t failed: $(tail -1 "$W/ll.log")"; exit 1; }
                fi
            done
        done
    done
done
"$PY" tests/peer/peer_table.py "$W" "$types" "$rounds" "$tlist"
