# The emulated device proves itself: each program under planted/ is built with its bug (-DPLANTED)
# and without, under AddressSanitizer and UBSan; the bug must be caught as CUDA would have it (a wrong
# result, a sanitizer report, an error naming the kernel and the line) and the correct counterpart
# must pass. Sourced by run.sh with BUILD, TMP and the helpers of tests/lib.sh.

P=$TMP/planted
mkdir -p "$P"
export CUDA_EMU_CACHE=$PWD/$BUILD/emu/cache
planted_build() { # NAME [FLAGS...]: $P/NAME-bug and $P/NAME-ok
    local f=tests/cuda_emu/planted/$1.cu n=$1
    shift
    tests/cuda_emu/nvcc-emu -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
        -fno-sanitize-recover=undefined "$@" -DPLANTED -o "$P/$n-bug" "$f" &&
        tests/cuda_emu/nvcc-emu -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined "$@" -o "$P/$n-ok" "$f"
}
# planted_run NAME KIND [SEED]: runs one build, its output (stdout and stderr) in $P/out, its status in rc
planted_run() {
    CUDA_EMU_SEED=${3:-1} ASAN_OPTIONS=detect_leaks=0 "$P/$1-$2" >"$P/out" 2>&1
    rc=$?
}
# planted_case NAME WHAT PATTERN...: the bug exits non-zero with every PATTERN (grep -E) in its output;
# the correct build prints "right" and exits 0
planted_case() {
    local name=$1 what=$2 pat missing=
    shift 2
    if ! planted_build "$name" >"$P/build" 2>&1; then
        fail "emu/planted $name builds" "$(tail -3 "$P/build" | tr '\n' ' ')"
        return
    fi
    planted_run "$name" bug
    for pat in "$@"; do grep -qE -- "$pat" "$P/out" || missing="$missing /$pat/"; done
    if [ "$rc" = 0 ] || [ -n "$missing" ]; then
        fail "emu/planted $name: $what" "exit $rc, output lacks$missing: $(head -c 400 "$P/out" | tr '\n' ' ')"
    else
        pass "emu/planted $name: $what"
    fi
    planted_run "$name" ok
    if [ "$rc" = 0 ] && grep -qx right "$P/out"; then
        pass "emu/planted $name: the correct counterpart passes"
    else
        fail "emu/planted $name: the correct counterpart passes" "exit $rc: $(head -c 400 "$P/out" | tr '\n' ' ')"
    fi
}

planted_case oob_shared "a shared write past its array is reported by AddressSanitizer" \
    'AddressSanitizer: heap-buffer-overflow' 'WRITE of size 4' 'oob_shared.cu:13'
planted_case oob_global "a global read past its allocation is reported by AddressSanitizer" \
    'AddressSanitizer: heap-buffer-overflow' 'READ of size 4' 'oob_global.cu:10'
planted_case branch_sync "a __syncthreads some threads skip is an error naming the kernel and both lines" \
    'kernel pairs' '__syncthreads in divergent code' 'branch_sync.cu:13' 'branch_sync.cu:18' 'unspecified launch failure'
planted_case shfl_exited "a full-mask shuffle with a lane gone is an error naming the kernel, the line and the lane" \
    'kernel warp_sum' '__shfl_xor_sync at [^ ]*shfl_exited.cu:13' 'reads lane 31, whose value is undefined: lane 31 has exited'
planted_case uninit "device memory never written reads as NaN" 'wrong: element 0 is -?nan'

planted_case struct_host "a struct argument holding a host pointer: the launch fails, and the sync after it" \
    'copy_rows at [^ ]*struct_host.cu:31: argument 1, a struct, holds at byte 0 a pointer' \
    'neither device nor pinned memory' \
    'cudaDeviceSynchronize\(\): an illegal memory access was encountered'
planted_case static_shared "more than 48 KB of static shared memory fails the launch, saying so" \
    'kernel spread' '53248 bytes of static shared memory a block: ptxas refuses more than 49152'

# the strict modes (CUDA_EMU_STRICT=1 turns on all five; the store switch and the report of
# never-written reads need device code built with --emu-trace-memory): each planted bug passes by
# default and is wrong under its mode for some seed of four; each correct counterpart is right under
# all four
planted_mode() { # NAME SETTING WHAT [BUILD-FLAGS...]
    local name=$1 setting=$2 what=$3 wrong=0 right=0 seed
    shift 3
    if ! planted_build "$name" "$@" >"$P/build" 2>&1; then
        fail "emu/planted $name builds" "$(tail -3 "$P/build" | tr '\n' ' ')"
        return
    fi
    planted_run "$name" bug
    same "emu/planted $name: the default emulation hides it" "0 right" "$rc $(tail -1 "$P/out")"
    for seed in 1 2 3 4; do
        env "$setting" CUDA_EMU_SEED=$seed ASAN_OPTIONS=detect_leaks=0 "$P/$name-bug" \
            >"$P/out" 2>&1
        grep -q '^wrong' "$P/out" && wrong=$((wrong + 1))
        env "$setting" CUDA_EMU_SEED=$seed ASAN_OPTIONS=detect_leaks=0 "$P/$name-ok" \
            >"$P/out" 2>&1 && grep -qx right "$P/out" && right=$((right + 1))
    done
    check "emu/planted $name: $what ($setting: wrong under $wrong of 4 seeds)" test $wrong -gt 0
    same "emu/planted $name: the correct counterpart is right under $setting, every seed" 4 "$right"
}
planted_mode hidden_uninit CUDA_EMU_POISON=random \
    "never-written memory that fmaxf hides changes the result"
planted_mode pinned_late CUDA_EMU_PINNED=call "pinned memory filled after its copy is queued"
planted_mode stream_order CUDA_EMU_STREAMS=unordered \
    "two streams with no event between them, a copy not waiting for its stream"
planted_mode lost_update CUDA_EMU_SWITCH=stores \
    "a read-modify-write of shared memory that is not atomic loses updates" --emu-trace-memory

# the report of reads of bytes never written (traced device code, CUDA_EMU_UNINIT=report): hidden by
# fmaxf by default, a launch failure naming the kernel, the line and the byte under the report
planted_report() { # NAME KERNEL LINE MEMORY
    local name=$1
    if ! planted_build "$name" --emu-trace-memory >"$P/build" 2>&1; then
        fail "emu/planted $name builds traced" "$(tail -3 "$P/build" | tr '\n' ' ')"
        return
    fi
    planted_run "$name" bug
    same "emu/planted $name: the default emulation hides it (traced)" "0 right" \
        "$rc $(tail -1 "$P/out")"
    CUDA_EMU_UNINIT=report ASAN_OPTIONS=detect_leaks=1 "$P/$name-bug" >"$P/out" 2>&1
    rc=$?
    check "emu/planted $name: CUDA_EMU_UNINIT=report fails the launch at the read" \
        grep -qE "kernel $2 .*a read of 4 bytes at [^ ]*$name.cu:$3 in thread .*: byte [0-9]+ of $4 of [0-9]+ bytes was never written" "$P/out"
    same "emu/planted $name: and the program's check sees the failure" 3 "$rc"
    CUDA_EMU_STRICT=1 ASAN_OPTIONS=detect_leaks=1 "$P/$name-ok" >"$P/out" 2>&1
    same "emu/planted $name: the correct counterpart is right under CUDA_EMU_STRICT=1" "0 right" \
        "$? $(tail -1 "$P/out")"
}
planted_report hidden_uninit maximum 12 "a device allocation"
planted_report unwritten_shared block_max 19 "a __shared__ array"

# a kernel taking a volatile pointer compiles and runs (as nvcc's do)
cat >"$P/volatile.cu" <<'EOF'
#include <cuda_runtime.h>
#include <stdio.h>
__global__ void k(volatile int *f, int v) { *f = v; }
int main()
{
    int *d, h = 0;
    cudaMalloc(&d, 4);
    k<<<1, 1>>>(d, 7);
    cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);
    printf("%d\n", h);
}
EOF
tests/cuda_emu/nvcc-emu -o "$P/volatile" "$P/volatile.cu" >"$P/build" 2>&1
same "emu/nvcc-emu compiles a kernel taking a volatile int *" 7 "$("$P/volatile" 2>&1)"

# CUDA objects a program never destroyed (an event, a captured graph and its instance, library
# handles) are no leaks, as a driver frees them at exit: LeakSanitizer reports none
cat >"$P/undestroyed.cu" <<'EOF'
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
__global__ void k(int *f) { *f = 1; }
int main()
{
    int *d;
    cudaStream_t s;
    cudaEvent_t e;
    cudaGraph_t g;
    cudaGraphExec_t x;
    cublasHandle_t h;
    cublasLtHandle_t lt;
    cudaMalloc(&d, 4);
    cudaStreamCreate(&s);
    cudaEventCreate(&e);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    k<<<1, 1, 0, s>>>(d);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&x, g, 0);
    cudaGraphLaunch(x, s);
    cublasCreate(&h);
    cublasLtCreate(&lt);
    printf("%s\n", cudaStreamSynchronize(s) == cudaSuccess ? "right" : "wrong");
}
EOF
tests/cuda_emu/nvcc-emu -O1 -g -fsanitize=address -o "$P/undestroyed" "$P/undestroyed.cu" \
    -lcublas -lcublasLt >"$P/build" 2>&1
ASAN_OPTIONS=detect_leaks=1 "$P/undestroyed" >"$P/out" 2>&1
same "emu/CUDA objects never destroyed are no leaks (a driver frees them at exit)" "0 right 0" \
    "$? $(head -1 "$P/out") $(grep -c LeakSanitizer "$P/out")"

# the missing barrier: wrong under some seed (the order threads run in between barriers is the seed's),
# and its correct counterpart right under every one
if planted_build missing_sync >"$P/build" 2>&1; then
    wrong=0 right=0
    for seed in 1 2 3 4 5 6 7 8; do
        planted_run missing_sync bug $seed
        grep -q '^wrong' "$P/out" && wrong=$((wrong + 1))
        planted_run missing_sync ok $seed
        [ "$rc" = 0 ] && grep -qx right "$P/out" && right=$((right + 1))
    done
    [ "$wrong" -gt 0 ] && pass "emu/planted missing_sync: a missing __syncthreads gives a wrong result ($wrong of 8 seeds)" ||
        fail "emu/planted missing_sync: a missing __syncthreads gives a wrong result" "right under all 8 seeds"
    same "emu/planted missing_sync: the correct counterpart is right under every seed" 8 "$right"
else
    fail "emu/planted missing_sync builds" "$(tail -3 "$P/build" | tr '\n' ' ')"
fi

# a replay runs what was captured: the planted build expects the captured value, the correct one recaptures
if planted_build graph_args >"$P/build" 2>&1; then
    planted_run graph_args bug
    [ "$rc" = 0 ] && grep -qx right "$P/out" && pass "emu/planted graph_args: a replay uses the argument captured, not the host's new value" ||
        fail "emu/planted graph_args: a replay uses the argument captured" "$(head -c 300 "$P/out")"
    planted_run graph_args ok
    [ "$rc" = 0 ] && grep -qx right "$P/out" && pass "emu/planted graph_args: a capture made after the change uses the new value" ||
        fail "emu/planted graph_args: a capture made after the change uses the new value" "$(head -c 300 "$P/out")"
else
    fail "emu/planted graph_args builds" "$(tail -3 "$P/build" | tr '\n' ' ')"
fi

# a standalone program with its own main, built and linked by nvcc-emu alone, with a C file beside it
printf '#include <stdio.h>\nint twice(int v);\nint main(void) { printf("%%d\\n", twice(21)); return 0; }\n' >"$P/main.c"
printf '#include <cuda_runtime.h>\n__global__ void k(int *o, int v) { o[threadIdx.x] = 2 * v; }\nextern "C" int twice(int v)\n{\n    int *d, h = 0;\n    cudaMalloc(&d, 4);\n    k<<<1, 1>>>(d, v);\n    cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);\n    return h;\n}\n' >"$P/twice.cu"
tests/cuda_emu/nvcc-emu -o "$P/twice" "$P/twice.cu" "$P/main.c" -lm >"$P/build" 2>&1
same "emu/nvcc-emu links .cu and .c files into a program" 42 "$("$P/twice" 2>&1)"
# ... and with the libraries a real nvcc needs named (its runtime is both cudart and cuBLAS)
rm -f "$P/twice"
tests/cuda_emu/nvcc-emu -o "$P/twice" "$P/twice.cu" "$P/main.c" -lcublas -lcublasLt -lcudart \
    >"$P/build" 2>&1
same "emu/nvcc-emu takes -lcublas -lcublasLt -lcudart" 42 "$("$P/twice" 2>&1)"
unset CUDA_EMU_CACHE
