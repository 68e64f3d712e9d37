#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (Hopper: sm_90), builds the CUDA backend, checks it
# against the CPU backend (its reference) kernel by kernel and end to end, and times the 124M and
# 1.5B shapes. Prints one table; meant to finish in well under 8 minutes on one H200.
# Needs the build's Debian packages (make deps; on a machine without a package mirror, run
# tests/gpu/fetch-deps.sh first where there is one and carry .deps/) and, for the peer figure,
# python3 with torch and transformers. Without a GPU it says so and exits 0.
set -u
cd "$(dirname "$0")/../.."
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "skip gpu/check: no NVIDIA GPU on this machine"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
KV=build/kvchat
PY=${PYTHON:-python3}
PASS=0 FAIL=0
row() { printf '%-52s %s\n' "$1" "$2"; }
ok() { PASS=$((PASS + 1)); row "$1" "ok   $2"; }
bad() { FAIL=$((FAIL + 1)); row "$1" "FAIL $2"; }
t0=$SECONDS
SYSROOT=
[ -d .deps/root/usr/include ] && SYSROOT=.deps/root   # carried from tests/gpu/fetch-deps.sh
make -j"$(nproc)" CUDA=1 SYSROOT=$SYSROOT CUDA_ARCH="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90" \
    all build/unit_tests >"$T/build.log" 2>&1 || { tail -20 "$T/build.log"; echo "build failed"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "built in $((SECONDS - t0)) s"
echo

echo "== agreement with the CPU backend"
out=$(build/unit_tests cuda)
for name in kernels_match_cpu_twins attention_matches_cpu_twin; do
    if echo "$out" | grep -q "^ok   cuda/$name"; then ok "kernels: $name" ""; else bad "kernels: $name" "$(echo "$out" | grep -A3 "$name" | tr '\n' ' ')"; fi
done
rel() { "$PY" -c "import numpy as n,sys;a=n.fromfile(sys.argv[1],'<f4').astype(float);b=n.fromfile(sys.argv[2],'<f4').astype(float);print('%.2e'%(n.linalg.norm(a-b)/n.linalg.norm(b)))" "$1" "$2"; }
IDS=464,3290,373,1043,287,257,2214,50256,0,31373,995,13
for shape in "2 4 64 128" "4 8 256 512"; do
    read -r L H E C <<<"$shape"
    for dt in f32 f16 bf16; do
        m=$T/m-$L-$E-$dt
        $KV make-tiny-model "$m" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --dtype "$dt" >/dev/null
        for dev in cpu cuda; do
            $KV generate -m "$m" --dtype "$dt" --device $dev --prompt-ids $IDS -n 1 --temp 0 -q --dump-logits "$T/$dev.bin" >/dev/null
        done
        e=$(rel "$T/cuda.bin" "$T/cpu.bin")
        limit=$([ $dt = f32 ] && echo 1e-4 || echo 2e-2)
        if "$PY" -c "import sys; sys.exit(0 if float('$e') < $limit else 1)"; then ok "logits ${L}x${E} $dt (limit $limit)" "rel L2 $e"; else bad "logits ${L}x${E} $dt (limit $limit)" "rel L2 $e"; fi
        a=$($KV generate -m "$m" --dtype "$dt" --device cpu --prompt-ids $IDS -n 32 --temp 0 --repeat-penalty 1 -q --output ids)
        b=$($KV generate -m "$m" --dtype "$dt" --device cuda --prompt-ids $IDS -n 32 --temp 0 --repeat-penalty 1 -q --output ids)
        same=$("$PY" -c "a='$a'.split();b='$b'.split();n=0
while n<min(len(a),len(b)) and a[n]==b[n]: n+=1
print(n)")
        if [ "$a" == "$b" ]; then ok "greedy 32 tokens ${L}x${E} $dt" "identical"; elif [ $dt = f32 ]; then bad "greedy 32 tokens ${L}x${E} $dt" "first $same agree"; else row "greedy 32 tokens ${L}x${E} $dt" "info first $same of 32 agree"; fi
    done
done
echo
echo "== cache layouts, dtypes, eviction and offload on the device (greedy chat, f32 weights)"
m=$T/m-2-64-f32
msgs=$(printf 'hello there\nhow are you\ntell me about the cache\nand more\nand then\none more turn\n')
for opts in "--cache-layout paged" "--cache-layout contiguous" "--cache-layout contiguous --prealloc" \
    "--cache-dtype f16" "--cache-dtype bf16" "--cache-dtype int8" "--ctx 64 --evict-min 8" "--ctx 64 --cache-mem 256K"; do
    a=$(echo "$msgs" | $KV chat --no-tui -m "$m" --dtype f32 --device cpu -n 12 --temp 0 $opts 2>&1)
    b=$(echo "$msgs" | $KV chat --no-tui -m "$m" --dtype f32 --device cuda -n 12 --temp 0 $opts 2>&1)
    if [ "$a" == "$b" ]; then ok "chat $opts" "same replies as the CPU"; else bad "chat $opts" "replies differ from the CPU"; fi
done
echo
echo "== speed (medians; $KV bench --device cuda)"
$KV make-tiny-model "$T/m124" --layers 12 --heads 12 --embd 768 --ctx 1024 --dtype bf16 >/dev/null
$KV bench -m "$T/m124" --device cuda --dtype bf16 --runs 5 --prefill 128,768,1024 --context 0,512,1000 --json "$T/b124.json"
$KV make-tiny-model "$T/m1558" --layers 48 --heads 25 --embd 1600 --ctx 1024 --dtype bf16 >/dev/null
$KV bench -m "$T/m1558" --device cuda --dtype bf16 --runs 3 --prefill 128 --context 0,512 --json "$T/b1558.json"
if "$PY" -c "import torch, transformers" 2>/dev/null; then
    "$PY" - "$T/b124.json" "$T/b1558.json" <<'PY'
import json, sys, time, torch, transformers
t = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
u = torch.empty_like(t)
torch.cuda.synchronize()
t0 = time.time()
for _ in range(20):
    u.copy_(t)
torch.cuda.synchronize()
bw = 2 * t.numel() * 20 / (time.time() - t0)  # read + write
for path, name in ((sys.argv[1], "124M"), (sys.argv[2], "1.5B")):
    r = json.load(open(path))["results"][0]
    floor = r["weight_bytes_per_token"] / bw
    print("%s bf16: decode at context 0 %.0f tok/s (%.0f us/token); bandwidth floor %.0f us/token at %.2f TB/s copy: %.2fx the floor"
          % (name, r["decode_ctx0_tok_s"], 1e6 / r["decode_ctx0_tok_s"], floor * 1e6, bw / 1e12, (1 / r["decode_ctx0_tok_s"]) / floor))
cfg = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024)
model = transformers.GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
ids = torch.randint(0, 50257, (1, 16), device="cuda")
with torch.no_grad():
    model.generate(ids, max_new_tokens=8, do_sample=False)
    torch.cuda.synchronize()
    t0 = time.time()
    model.generate(ids, max_new_tokens=256, min_new_tokens=256, do_sample=False)
    torch.cuda.synchronize()
hf = 256 / (time.time() - t0)
ours = json.load(open(sys.argv[1]))["results"][0]["decode_ctx0_tok_s"]
print("transformers generate (eager, bf16, 124M shape): %.0f tok/s; kvchat %.0f tok/s: %.1fx" % (hf, ours, ours / hf))
PY
else
    echo "(python3 with torch and transformers not found: no bandwidth floor or peer figure)"
fi
echo
echo "total $((SECONDS - t0)) s"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
