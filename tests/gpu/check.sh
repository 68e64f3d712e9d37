#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (Hopper: sm_90), builds the CUDA backend, checks it
# against the CPU backend (its reference) kernel by kernel and end to end, and times the 124M and
# 1.5B shapes against the memory-bandwidth floor and the issue's targets. Prints one table; meant to
# finish in well under 8 minutes on one H200.
# Needs the build's Debian packages (make deps; on a machine without a package mirror, run
# tests/gpu/fetch-deps.sh first where there is one and carry .deps/) and, for the measured copy
# bandwidth and the peer figure, python3 with torch and transformers. Without a GPU it says so and
# exits 0. OUT=DIR keeps the figures, the table and the logs there (10 files at most).
# Both kernel sets are checked: fast (the default) and basic (the previous release's, the fallback).
# Where the CPU and the GPU are compared, both are given the cache dtype (a GPU's default is bf16).
set -u
cd "$(dirname "$0")/../.."
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skip gpu/check: no NVIDIA GPU on this machine"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
OUT=${OUT:-$T}
mkdir -p "$OUT"
KV=build/kvchat
PY=${PYTHON:-python3}
# the comparisons below are the raw figures: the first-use self-test must not move them to the CPU
# (its own rows come from `kvchat selftest`, with its verdicts cached in this run's folder)
export KVCHAT_SELFTEST=0 XDG_CACHE_HOME=$T/cache
PASS=0 FAIL=0
row() { printf '%-58s %s\n' "$1" "$2"; }
ok() { PASS=$((PASS + 1)); row "$1" "ok   $2"; }
bad() { FAIL=$((FAIL + 1)); row "$1" "FAIL $2"; }
t0=$SECONDS
SYSROOT=
[ -d .deps/root/usr/include ] && SYSROOT=.deps/root   # carried from tests/gpu/fetch-deps.sh
make -j"$(nproc)" CUDA=1 SYSROOT=$SYSROOT CUDA_ARCH="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90" \
    all build/unit_tests >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; echo "build failed"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "built in $((SECONDS - t0)) s"
echo

echo "== agreement with the CPU backend"
out=$(build/unit_tests cuda 2>&1 | tee "$OUT/unit.log")
for name in kernels_match_cpu_twins fused_matches_cpu_twin q8_matches_cpu_twin attention_matches_cpu_twin sample_matches_cpu_twin model_steps_match_cpu; do
    if echo "$out" | grep -q "^ok   cuda/$name"; then ok "twins: $name" ""; else bad "twins: $name" "$(echo "$out" | grep -A3 "$name" | tr '\n' ' ')"; fi
done
# the kernels under NVIDIA's checkers: out-of-bounds and misaligned accesses, then shared-memory races
if command -v compute-sanitizer >/dev/null 2>&1; then
    for check in "memcheck cuda/ 120" "racecheck cuda/attention 50" "racecheck cuda/sample 50" "racecheck cuda/fused 40"; do
        read -r tool filter limit <<<"$check"
        log=$OUT/$tool-${filter//\//-}.log
        timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 build/unit_tests "$filter" >"$log" 2>&1
        rc=$?
        errors=$(grep -m3 -E 'ERROR|Invalid|Race|hazard|^FAIL' "$log" | tr '\n' ' ')
        # a run stopped at its time limit is judged by what it reported until then
        if [ -n "$errors" ] || { [ $rc != 0 ] && [ $rc != 124 ]; }; then
            bad "compute-sanitizer $tool ($filter)" "exit $rc: $errors"
        else
            ok "compute-sanitizer $tool ($filter)" "$([ $rc = 124 ] && echo "no error in the $limit s it ran")"
        fi
    done
else
    row "compute-sanitizer" "info not found on this machine"
fi
rel() { "$PY" -c "import numpy as n,sys;a=n.fromfile(sys.argv[1],'<f4').astype(float);b=n.fromfile(sys.argv[2],'<f4').astype(float);print('%.2e'%(n.linalg.norm(a-b)/n.linalg.norm(b)))" "$1" "$2"; }
IDS=464,3290,373,1043,287,257,2214,50256,0,31373,995,13
for shape in "2 4 64 128 f32,f16,bf16" "4 8 256 512 f32,f16,bf16" "12 12 768 1024 f32,bf16"; do
    read -r L H E C types <<<"$shape"
    for dt in ${types//,/ }; do
        m=$T/m-$L-$E-$dt
        $KV make-tiny-model "$m" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --dtype "$dt" >/dev/null
        for dev in cpu cuda; do
            $KV generate -m "$m" --dtype "$dt" --cache-dtype f32 --device $dev --prompt-ids $IDS -n 1 --temp 0 -q --dump-logits "$T/$dev.bin" >/dev/null
        done
        e=$(rel "$T/cuda.bin" "$T/cpu.bin")
        limit=$([ "$dt" = f32 ] && echo 1e-4 || echo 2e-2)
        if "$PY" -c "import sys; sys.exit(0 if float('$e') < $limit else 1)"; then ok "logits ${L}x${E} $dt (limit $limit)" "rel L2 $e"; else bad "logits ${L}x${E} $dt (limit $limit)" "rel L2 $e"; fi
        for ks in fast basic; do # each set with the GPU's default cache (bf16), against the CPU on the same
            st=$($KV selftest -m "$m" --device cuda --dtype "$dt" --gpu-kernels $ks 2>&1 | tail -1)
            case $st in *": passed") ok "selftest ${L}x${E} $dt, $ks kernels" "${st##*error }" ;; *) bad "selftest ${L}x${E} $dt, $ks kernels" "$st" ;; esac
        done
        a=$($KV generate -m "$m" --dtype "$dt" --cache-dtype f32 --device cpu --prompt-ids $IDS -n 32 --temp 0 --repeat-penalty 1 -q --output ids)
        b=$($KV generate -m "$m" --dtype "$dt" --cache-dtype f32 --device cuda --prompt-ids $IDS -n 32 --temp 0 --repeat-penalty 1 -q --output ids)
        same=$("$PY" -c "a='$a'.split();b='$b'.split();n=0
while n<min(len(a),len(b)) and a[n]==b[n]: n+=1
print(n)")
        if [ "$a" == "$b" ]; then ok "greedy 32 tokens ${L}x${E} $dt" "identical"; elif [ "$dt" = f32 ]; then bad "greedy 32 tokens ${L}x${E} $dt" "first $same agree"; else row "greedy 32 tokens ${L}x${E} $dt" "info first $same of 32 agree"; fi
    done
done
# sampled (temperature, top-k, top-p, penalty, seed): the same rule on both, so the same ids unless a
# last-bit difference moves a token across a threshold
m=$T/m-4-256-f32
a=$($KV generate -m "$m" --dtype f32 --cache-dtype f32 --device cpu --prompt-ids $IDS -n 48 --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 -q --output ids)
for ks in fast basic; do
    b=$($KV generate -m "$m" --dtype f32 --cache-dtype f32 --device cuda --gpu-kernels $ks --prompt-ids $IDS -n 48 --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 -q --output ids)
    if [ "$a" == "$b" ]; then ok "sampled 48 tokens 4x256 f32, seed 7, $ks kernels" "identical"; else bad "sampled 48 tokens 4x256 f32, seed 7, $ks kernels" "differ"; fi
done
echo
echo "== every step against the CPU (teacher forcing: 300-token prompt, then 200 forced ids, window 1024)"
# the same ids fed to both backends, the logits of the prefill and of each decode step compared: more
# than 256 positions of context (several attention chunks) through recorded-step replay. Limits: 1e-4
# for f32 weights and cache (accumulation order); 3e-2 (the self-test's bf16 limit) where weights or
# cache are 16-bit or int8, until this table measures the spread
m=$T/m-4-256-1024
$KV make-tiny-model "$m" --layers 4 --heads 8 --embd 256 --ctx 1024 --seed 5 >/dev/null
P=$("$PY" -c "print(','.join(str((i * 7919 + 13) % 50257) for i in range(300)))")
F=$("$PY" -c "print(','.join(str((i * 104729 + 7) % 50257) for i in range(200)))")
worst() { "$PY" -c "import numpy as n,sys;a=n.fromfile(sys.argv[1],'<f4').reshape(-1,50257).astype(float);b=n.fromfile(sys.argv[2],'<f4').reshape(-1,50257).astype(float)
print('%.2e %d'%(max(n.linalg.norm(x-y)/n.linalg.norm(y) for x,y in zip(a,b)) if a.shape==b.shape else float('inf'),len(b)))" "$1" "$2"; }
# (the basic set on the paged cache only)
for wdt in f32 bf16 q8; do
    for layout in paged contiguous; do
        for cdt in f32 f16 bf16 int8; do
            [ $wdt = q8 ] && { [ $layout = contiguous ] || [ $cdt != f16 ]; } && continue
            $KV generate -m "$m" --device cpu --dtype $wdt --cache-layout $layout --cache-dtype $cdt --ctx 1024 \
                --prompt-ids "$P" --force-ids "$F" --dump-logits "$T/tf-cpu.bin" -q >/dev/null 2>>"$OUT/forced.log"
            for ks in fast basic; do
                [ $ks = basic ] && [ $layout = contiguous ] && continue
                $KV generate -m "$m" --device cuda --gpu-kernels $ks --dtype $wdt --cache-layout $layout --cache-dtype $cdt --ctx 1024 \
                    --prompt-ids "$P" --force-ids "$F" --dump-logits "$T/tf-cuda.bin" -q >/dev/null 2>>"$OUT/forced.log"
                read -r e rows <<<"$(worst "$T/tf-cuda.bin" "$T/tf-cpu.bin")"
                limit=$([ $wdt = f32 ] && [ $cdt = f32 ] && echo 1e-4 || { [ $wdt = q8 ] && echo 5e-2; } || echo 3e-2)
                name="forced steps $wdt weights, $layout $cdt cache, $ks (limit $limit)"
                if [ "$rows" = 201 ] && "$PY" -c "import sys; sys.exit(0 if float('$e') < $limit else 1)"; then ok "$name" "worst rel L2 $e"
                else bad "$name" "worst rel L2 $e over $rows rows"; fi
            done
        done
    done
done
# the same through the chat engine: two conversations fed recorded ids (replay --verify --dump-logits),
# evicting in a window of 128 and, in a 96 KiB pool, offloaded to pinned memory and restored
m=$T/m-2-32-128
$KV make-tiny-model "$m" --layers 2 --heads 2 --embd 32 --ctx 128 --seed 3 >/dev/null
printf 'hi\n' | $KV chat --no-tui -m "$m" --device cpu -n 2 --session "$T/src.jsonl" >/dev/null 2>&1
for wdt in f32 bf16; do
    "$PY" tests/forced_session.py "$T/src.jsonl" "$T/forced.jsonl" $wdt
    for dev in cpu cuda; do
        $KV replay "$T/forced.jsonl" --verify -m "$m" --device $dev --cache-mem 96K \
            --dump-logits "$T/fc-$dev.bin" >/dev/null 2>>"$OUT/forced.log"
    done
    read -r e rows <<<"$(worst "$T/fc-cuda.bin" "$T/fc-cpu.bin")"
    limit=$([ $wdt = f32 ] && echo 1e-4 || echo 3e-2)
    name="forced chat, eviction and offload, $wdt weights (limit $limit)"
    if [ "$rows" = 288 ] && "$PY" -c "import sys; sys.exit(0 if float('$e') < $limit else 1)"; then ok "$name" "worst rel L2 $e"
    else bad "$name" "worst rel L2 $e over $rows rows"; fi
done
echo
echo "== cache layouts, dtypes, eviction and offload on the device (greedy chat, f32 weights)"
m=$T/m-2-64-f32
msgs=$(printf 'hello there\nhow are you\ntell me about the cache\nand more\nand then\none more turn\n')
for opts in "--cache-layout paged" "--cache-layout contiguous" "--cache-layout contiguous --prealloc" \
    "--cache-dtype f16" "--cache-dtype bf16" "--cache-dtype int8" "--ctx 64 --evict-min 8" "--ctx 64 --evict shift" \
    "--ctx 64 --cache-mem 256K"; do
    a=$(echo "$msgs" | $KV chat --no-tui --no-save -m "$m" --dtype f32 --cache-dtype f32 --device cpu -n 12 --temp 0 $opts 2>&1)
    b=$(echo "$msgs" | $KV chat --no-tui --no-save -m "$m" --dtype f32 --cache-dtype f32 --device cuda -n 12 --temp 0 $opts 2>&1)
    if [ "$a" == "$b" ]; then ok "chat $opts" "same replies as the CPU"; else bad "chat $opts" "replies differ from the CPU"; fi
done
echo
echo "== speed ($KV bench --device cuda: medians of each step's device time by CUDA events, the chosen id included)"
$KV make-tiny-model "$T/m124" --layers 12 --heads 12 --embd 768 --ctx 1024 --dtype bf16 >/dev/null
$KV bench -m "$T/m124" --device cuda --dtype bf16 --runs 7 --prefill 128,768,1024 --context 0,512,1000 --json "$OUT/b124.json"
$KV bench -m "$T/m124" --device cuda --gpu-kernels basic --dtype bf16 --runs 3 --prefill 128 --context 0,512,1000 --json "$OUT/b124-basic.json"
$KV make-tiny-model "$T/m1558" --layers 48 --heads 25 --embd 1600 --ctx 1024 --dtype bf16 >/dev/null
$KV bench -m "$T/m1558" --device cuda --dtype bf16 --runs 3 --prefill 128 --context 0,512 --json "$OUT/b1558.json"
rm -rf "$T/m1558"
echo
"$PY" tests/gpu/report.py "$OUT/b124.json" "$OUT/b1558.json" "$OUT/b124-basic.json" | tee "$OUT/report.txt"
echo
echo "total $((SECONDS - t0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
