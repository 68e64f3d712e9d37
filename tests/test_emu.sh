# The CUDA backend end to end on the emulated device (build/emu/kvchat, whose --device cuda is the
# emulated H200, everything under AddressSanitizer and UBSan): the chat gives the CPU's replies through
# evictions, a session of two conversations that go to host memory and come back replays with the
# CPU's logits, and the self-test passes. Sourced by run.sh with KV (the emulated build), CPU_KV (the
# CPU build), TMP and PYTHON.

E=$TMP/emu
mkdir -p "$E"
"$CPU_KV" make-tiny-model "$E/m" --layers 2 --heads 2 --embd 32 --ctx 160 --seed 9 >/dev/null
msgs=$'Hello there\nHow are you today?\nTell me about the cache, please.\nAnd then?'
emu_chat() { "$1" chat --no-tui -m "$E/m" --dtype f32 -n 4 --seed 1 --ctx 32 --device "$2" --events "$E/$2.jsonl"; }
cpu=$(printf '%s\n' "$msgs" | emu_chat "$CPU_KV" cpu 2>"$E/cpu.err")
gpu=$(printf '%s\n' "$msgs" | KVCHAT_SELFTEST=0 emu_chat "$KV" cuda 2>"$E/cuda.err")
same "${TAG}emu/chat on the emulated GPU gives the CPU's replies" "$cpu" "$gpu"
same "${TAG}emu/the chat ran on the emulated H200, its window sliding" "4 evict" \
    "$(echo "$gpu" | wc -l) $(grep -o '"ev":"evict"' "$E/cuda.jsonl" | head -1 | cut -d'"' -f4)"
check "${TAG}emu/no error from the emulated device" bash -c "! grep -E 'cuda-emu|AddressSanitizer|runtime error' '$E/cuda.err'"

# teacher forcing (replay --verify --dump-logits) through two conversations in a pool too small for
# both, so each goes to host memory and back; the basic kernels (cuBLAS for the LM head) keep it short
printf 'hi\n' | "$CPU_KV" chat --no-tui -m "$E/m" -n 2 --ctx 40 --session "$E/base.jsonl" >/dev/null
"$PYTHON" tests/forced_session.py "$E/base.jsonl" "$E/forced.jsonl" "" 12
replay() { "$1" replay "$E/forced.jsonl" --verify --dump-logits "$E/$2.bin" --cache-mem 24K --device "$2" "${@:3}"; }
replay "$CPU_KV" cpu >/dev/null 2>&1
KVCHAT_SELFTEST=0 replay "$KV" cuda --gpu-kernels basic >"$E/replay.out" 2>&1
check "${TAG}emu/a replay with offloads gives the CPU's logits at every step" "$PYTHON" -c "
import numpy as n
a = n.fromfile('$E/cuda.bin', '<f4').reshape(-1, 50257); b = n.fromfile('$E/cpu.bin', '<f4').reshape(-1, 50257)
assert a.shape == b.shape and len(a) >= 72, (a.shape, b.shape)
e = max(n.linalg.norm(x - y) / n.linalg.norm(y) for x, y in zip(a, b))
assert e < 1e-4, e"
check "${TAG}emu/the replay reproduced every turn, evicting and going to host memory on the way" \
    grep -qE 'all 6 turns reproduce \(the re-run evicted [1-9][0-9]* times and went to host memory [1-9]' "$E/replay.out"

# the self-test at first use, on the emulated device: a window of three chunks of the fast decode
# attention, grown while the recorded step replays
SECONDS=0
"$KV" selftest -m "$E/m" --device cuda >"$E/selftest.out" 2>&1
secs=$SECONDS
check "${TAG}emu/the self-test passes on the emulated device (${secs} s)" grep -q 'fast kernels: 13 steps compared.*passed' "$E/selftest.out"
