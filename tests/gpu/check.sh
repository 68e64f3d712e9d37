#!/usr/bin/env bash
# The GPU check: the CUDA backend against the CPU backend (its reference), kernel by kernel and end
# to end, under NVIDIA's sanitizers, and its speed against the memory floor and the targets.
#
#   tests/gpu/check.sh BUNDLE       on a machine with an NVIDIA GPU, from a bundle that
#                                   tests/gpu/bundle.sh built elsewhere: nothing is built here
#   tests/gpu/check.sh --emulated   on the emulated device (make emu), quick: tiny shapes, a few
#                                   steps, no speed targets; make test runs it, and again with a
#                                   fault planted in one kernel (CUDA_EMU_FAULT), where it must fail
#   --only LIST    some of the sections, in this order: speed,twins,logits,forced,chat,sanitizer
#   --budget S     seconds for the whole check (default 330 on a GPU, 900 emulated); a run stopped
#                  by its own limit or by the budget is "incomplete", and so is the check
#
# Prints a table of rows "ok|FAIL|incomplete|info|skip NAME  DETAIL" and closes with
# "N passed, N failed, N incomplete"; exits 0 only when nothing failed and nothing is incomplete.
# OUT=DIR keeps check.txt (the table, written as it grows), speed.txt and the bench JSON (written as
# soon as the speed section ends, which comes first) and logs.txt (every run's command and stderr).
set -u
cd "$(dirname "$0")/../.."
usage() { # usage [STATUS]: the options (on stdout for --help)
    echo "usage:"
    sed -n '5,12p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
} >&"$([ "${1:-2}" = 0 ] && echo 1 || echo 2)"
die() { echo "check: $*" >&2; exit 2; }

EMULATED=0 BUNDLE= ONLY=speed,twins,logits,forced,chat,sanitizer BUDGET=
while [ $# -gt 0 ]; do
    case $1 in
    --emulated) EMULATED=1 ;;
    --only) ONLY=${2:?--only needs a list}; shift ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift ;;
    -h | --help) usage 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$BUNDLE" ] || die "one bundle only"; BUNDLE=$1 ;;
    esac
    shift
done
for s in ${ONLY//,/ }; do
    case ,speed,twins,logits,forced,chat,sanitizer, in
    *,$s,*) ;;
    *) die "--only: no section '$s'" ;;
    esac
done
case ${BUDGET:-1} in '' | *[!0-9]*) die "--budget: '$BUDGET' is not a number of seconds" ;; esac
PY=${PYTHON:-python3}
JUDGE="$PY tests/gpu/judge.py"

if [ $EMULATED = 1 ]; then
    [ -z "$BUNDLE" ] || die "--emulated takes no bundle"
    KV=build/emu/kvchat UT=build/emu/unit_tests
    [ -x $KV ] && [ -x $UT ] || die "$KV and $UT not found: make emu"
    BUDGET=${BUDGET:-900}
else
    [ -n "$BUNDLE" ] || usage
    KV=$BUNDLE/kvchat UT=$BUNDLE/unit_tests
    [ -x "$KV" ] && [ -x "$UT" ] ||
        die "$BUNDLE is not a bundle (no kvchat and unit_tests): tests/gpu/bundle.sh makes one"
    nvidia-smi -L >/dev/null 2>&1 ||
        die "no NVIDIA GPU here (nvidia-smi -L); --emulated runs the check on the emulated device"
    BUDGET=${BUDGET:-330}
    export KVCHAT_ASSETS=$BUNDLE/assets
fi
DEADLINE=$((SECONDS + BUDGET))
# big scratch (the 1.5B shape is 3.1 GB) in memory where there is room
scratch=/tmp
[ -w /dev/shm ] && [ "$(df -k --output=avail /dev/shm | tail -1)" -gt 8000000 ] && scratch=/dev/shm
T=$(mktemp -d "$scratch/kvchat-check-XXXXXX")
trap 'rm -rf "$T"' EXIT
OUT=${OUT:-$T/out}
mkdir -p "$OUT"
: >"$OUT/check.txt"
: >"$OUT/logs.txt"
# the raw figures: no first-use self-test moving a model to the CPU (the self-test has its own rows)
export KVCHAT_SELFTEST=0 XDG_CACHE_HOME=$T/cache
PASS=0 FAIL=0 INCOMPLETE=0 SKIP=0

# row VERDICT NAME DETAIL: one line of the table, counted
row() {
    case $1 in
    ok) PASS=$((PASS + 1)) ;;
    FAIL) FAIL=$((FAIL + 1)) ;;
    incomplete) INCOMPLETE=$((INCOMPLETE + 1)) ;;
    skip) SKIP=$((SKIP + 1)) ;;
    esac
    printf '%-10s %-62s %s\n' "$1" "$2" "$3" | tee -a "$OUT/check.txt"
}
# run LIMIT CMD...: CMD with its stdout in $T/stdout, its stderr in $T/stderr (and logs.txt),
# stopped after LIMIT seconds or at the budget; RC is its exit status (124: stopped, or not started)
run() {
    local limit=$1 left=$((DEADLINE - SECONDS))
    shift
    [ "$left" -lt "$limit" ] && limit=$left
    echo "\$ $*" >>"$OUT/logs.txt"
    if [ "$limit" -lt 1 ]; then
        echo "(not run: the budget of $BUDGET s is spent)" | tee "$T/stderr" >>"$OUT/logs.txt"
        : >"$T/stdout"
        RC=124
        return
    fi
    timeout -k 5 "$limit" "$@" >"$T/stdout" 2>"$T/stderr"
    RC=$?
    head -c 20000 "$T/stderr" >>"$OUT/logs.txt"
}
# failed NAME: a row for the run just made when it did not exit 0 (true then), naming how it ended
failed() {
    case $RC in
    0) return 1 ;;
    124 | 137) row incomplete "$1" "stopped at its limit: $(tail -1 "$T/stderr" | cut -c1-60)" ;;
    *) row FAIL "$1" "exit $RC: $(grep -v '^\s*$' "$T/stderr" | tail -1 | cut -c1-160)" ;;
    esac
}
# judged NAME JUDGE-ARGS...: a row from tests/gpu/judge.py's verdict
judged() {
    local name=$1 v
    shift
    v=$($JUDGE "$@" 2>&1 | tail -1)
    case ${v%% *} in
    ok | FAIL | incomplete | info) row "${v%% *}" "$name" "${v#* }" ;;
    *) row FAIL "$name" "judge: $v" ;;
    esac
}
section() { # section NAME TITLE: true when NAME is to run
    case ,$ONLY, in *,$1,*) ;; *) return 1 ;; esac
    echo
    echo "== $2" | tee -a "$OUT/check.txt"
}
tiny() { # tiny DIR ARGS...: a random checkpoint (made by the same binary, on the CPU)
    local dir=$1
    shift
    [ -f "$dir/model.safetensors" ] && return
    run 120 "$KV" make-tiny-model "$dir" "$@"
    failed "model ${dir##*/}" && rm -rf "$dir"
}

# what each mode runs: the shapes and lengths
IDS=464,3290,373,1043,287,257,2214,50256,0,31373,995,13
if [ $EMULATED = 1 ]; then
    SHAPES=("2 4 64 128 f32,bf16") GREEDY=3 SAMPLED=3 SAMPLED_MODEL="2 4 64 128"
    FORCED_MODEL="2 4 64 128" PROMPT=12 FORCE=3 FORCED_WINDOW=128
    FORCED_RUNS=("f32 paged f32 fast,basic" "f32 contiguous int8 basic" "bf16 paged bf16 basic"
        "q8 paged f16 basic")
    CHAT_FORCED=("f32 40 12 24K basic")
    CHAT_OPTS=("--cache-layout contiguous --cache-dtype int8" "--ctx 32 --evict-min 8")
    CHAT_TOKENS=3 CHAT_SET=basic
    SANITIZER_RUNS=("memcheck 60 cuda/q8" "racecheck 60 cuda/kernels")
else
    SHAPES=("2 4 64 128 f32,f16,bf16" "4 8 256 512 f32,bf16" "12 12 768 1024 f32,bf16")
    GREEDY=32 SAMPLED=48 SAMPLED_MODEL="4 8 256 512"
    FORCED_MODEL="4 8 256 1024" PROMPT=300 FORCE=200 FORCED_WINDOW=1024
    # each cache dtype on both kernel sets, the contiguous layout, 16-bit and int8 weights
    FORCED_RUNS=("f32 paged f32 fast,basic" "f32 paged f16 fast,basic" "f32 paged bf16 fast,basic"
        "f32 paged int8 fast,basic" "f32 contiguous f32 fast" "f32 contiguous int8 fast"
        "bf16 paged bf16 fast,basic" "q8 paged f16 fast,basic")
    CHAT_FORCED=("f32 128 48 96K fast" "bf16 128 48 96K fast")
    CHAT_OPTS=("--cache-layout paged" "--cache-layout contiguous"
        "--cache-layout contiguous --prealloc" "--cache-dtype f16" "--cache-dtype bf16"
        "--cache-dtype int8" "--ctx 64 --evict-min 8" "--ctx 64 --evict shift"
        "--ctx 64 --cache-mem 256K")
    CHAT_TOKENS=12 CHAT_SET=fast
    # small filters and the quick sizes (KVCHAT_TEST_QUICK): the tools slow kernels tenfold or more
    SANITIZER_RUNS=("memcheck 70 cuda/" "racecheck 60 cuda/attention cuda/sample cuda/fused")
fi

what="bundle $BUNDLE"
[ $EMULATED = 1 ] && what="emulated device, quick"
echo "kvchat GPU check ($what), $(date -u '+%F %H:%M UTC')" | tee -a "$OUT/check.txt"
if [ $EMULATED = 0 ]; then
    # cuBLAS from the machine's CUDA toolkit, wherever it keeps it
    if ldd "$KV" | grep -q 'libcublas.*not found'; then
        wheels=$("$PY" -c 'import nvidia, os
print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cu13", "cublas")))' \
            2>/dev/null)
        for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 \
            /usr/local/cuda*/targets/x86_64-linux/lib $wheels; do
            if [ -e "$d/libcublasLt.so.13" ]; then
                export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
                break
            fi
        done
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
        tee -a "$OUT/check.txt"
    echo "bundle built from $(tr '\n' ' ' <"$BUNDLE/COMMIT" 2>/dev/null)" | tee -a "$OUT/check.txt"
    missing=$(ldd "$KV" "$UT" | grep 'not found' | sort -u | tr -s ' \t\n' ' ')
    if [ -n "$missing" ]; then row FAIL "bundle: every library it needs is found" "$missing"; fi
fi

if section speed "speed ($KV bench --device cuda: each step's device time by CUDA events)"; then
    rm -f "$OUT"/b124.json "$OUT"/b124-basic.json "$OUT"/b1558.json
    if [ $EMULATED = 1 ]; then
        tiny "$T/m-2-64-bf16" --layers 2 --heads 4 --embd 64 --ctx 128 --dtype bf16
        run 120 "$KV" bench -m "$T/m-2-64-bf16" --device cuda --gpu-kernels basic --dtype bf16 \
            --runs 1 --prefill 16 --context 0,8 --json "$OUT/b124.json"
        failed "bench, the tiny model, basic kernels"
        "$PY" tests/gpu/report.py --verdicts "$T/verdicts" --small "$OUT/b124.json" --contexts 0,8 \
            --prefills 16 --no-targets >"$OUT/speed.txt" 2>&1
    else
        tiny "$T/m124" --layers 12 --heads 12 --embd 768 --ctx 1024 --dtype bf16
        run 60 "$KV" bench -m "$T/m124" --device cuda --dtype bf16 --runs 7 --prefill 128,768,1024 \
            --context 0,512,1000 --json "$OUT/b124.json"
        failed "bench, 124M shape, fast kernels"
        run 40 "$KV" bench -m "$T/m124" --device cuda --gpu-kernels basic --dtype bf16 --runs 3 \
            --prefill 128 --context 0,512,1000 --json "$OUT/b124-basic.json"
        failed "bench, 124M shape, basic kernels"
        tiny "$T/m1558" --layers 48 --heads 25 --embd 1600 --ctx 1024 --dtype bf16
        run 60 "$KV" bench -m "$T/m1558" --device cuda --dtype bf16 --runs 3 --prefill 128 \
            --context 0,512 --json "$OUT/b1558.json"
        failed "bench, 1.5B shape"
        rm -rf "$T/m1558"
        "$PY" tests/gpu/report.py --verdicts "$T/verdicts" --small "$OUT/b124.json" \
            --large "$OUT/b1558.json" --basic "$OUT/b124-basic.json" >"$OUT/speed.txt" 2>&1
    fi
    sed 's/^/  /' "$OUT/speed.txt" | tee -a "$OUT/check.txt"
    [ -s "$T/verdicts" ] || echo "FAIL speed report: $(tail -1 "$OUT/speed.txt")" >"$T/verdicts"
    while read -r v rest; do row "$v" "speed: ${rest%%: *}" "${rest#*: }"; done <"$T/verdicts"
fi

if section twins "every kernel against its CPU twin ($UT cuda/)"; then
    run $([ $EMULATED = 1 ] && echo 240 || echo 90) "$UT" cuda/
    out=$T/stdout
    names="kernels_match_cpu_twins fused_matches_cpu_twin q8_matches_cpu_twin
        attention_matches_cpu_twin sample_matches_cpu_twin model_steps_match_cpu driver_messages"
    # and any other cuda/ test that failed
    others=$(grep -oE '^FAIL cuda/[a-z0-9_]+' "$out" | cut -d/ -f2 |
        grep -vxF "$(echo $names | tr ' ' '\n')")
    for t in $names $others; do
        if grep -q "^ok   cuda/$t\$" "$out"; then
            row ok "twins: $t" ""
        elif grep -q "^FAIL cuda/$t" "$out"; then
            why=$(grep -A3 "^FAIL cuda/$t" "$out" | sed "s|^FAIL ||; s|^ *cuda/$t: *||" |
                tr '\n' ' ')
            row FAIL "twins: $t" "${why:0:200}"
        elif grep -q "^skip cuda/$t" "$out"; then
            row FAIL "twins: $t" "skipped: $(grep -m1 "^skip cuda/$t" "$out" | cut -c1-160)"
        elif [ $RC = 124 ] || [ $RC = 137 ]; then
            row incomplete "twins: $t" "not reached before the time limit"
        else
            row FAIL "twins: $t" "did not report (exit $RC: $(tail -1 "$T/stderr" | cut -c1-120))"
        fi
    done
    if [ $RC != 0 ] && ! grep -q '^FAIL ' "$out" && grep -q '^unit: ' "$out"; then
        row FAIL "twins: unit_tests exit status" "exit $RC after its tests passed"
    fi
fi

if section logits "logits, self-test and greedy tokens against the CPU (an f32 cache on both)"; then
    for shape in "${SHAPES[@]}"; do
        read -r L H E C types <<<"$shape"
        for dt in ${types//,/ }; do
            m=$T/m-$L-$E-$dt
            tiny "$m" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --dtype "$dt"
            limit=$([ "$dt" = f32 ] && echo 1e-4 || echo 2e-2)
            name="logits ${L}x${E} $dt (limit $limit)"
            rm -f "$T/cpu.bin" "$T/cuda.bin"
            gen() {
                run 60 "$KV" generate -m "$m" --dtype "$dt" --cache-dtype f32 --prompt-ids $IDS \
                    --temp 0 -q --device "$@"
            }
            gen cpu -n 1 --dump-logits "$T/cpu.bin"
            if ! failed "$name (CPU run)"; then
                gen cuda -n 1 --dump-logits "$T/cuda.bin"
                failed "$name" || judged "$name" logits "$T/cuda.bin" "$T/cpu.bin" "$limit"
            fi
            # each kernel set with the GPU's default cache (bf16), against the CPU on the same;
            # quick: the fast set (a second of emulation a step) for the GPU's default weights only
            sets="fast basic"
            [ $EMULATED = 1 ] && [ "$dt" != bf16 ] && sets=basic
            for ks in $sets; do
                name="selftest ${L}x${E} $dt, $ks kernels"
                run 60 "$KV" selftest -m "$m" --device cuda --dtype "$dt" --gpu-kernels $ks
                if ! failed "$name"; then
                    st=$(tail -1 "$T/stdout")
                    case $st in
                    *": passed") row ok "$name" "${st##*error }" ;;
                    *) row FAIL "$name" "$st" ;;
                    esac
                fi
            done
            name="greedy $GREEDY tokens ${L}x${E} $dt"
            gen cpu -n $GREEDY --repeat-penalty 1 --output ids && cp "$T/stdout" "$T/ids-cpu"
            if ! failed "$name (CPU run)"; then
                gen cuda -n $GREEDY --repeat-penalty 1 --output ids
                ties=$([ "$dt" != f32 ] && echo 16bit)
                failed "$name" || judged "$name" ids "$T/stdout" "$T/ids-cpu" $GREEDY $ties
            fi
        done
    done
    # sampled (temperature, top-k, top-p, penalty, seed): the same rule on both, so the same ids
    # unless a last-bit difference moves a token across a threshold
    read -r L H E C <<<"$SAMPLED_MODEL"
    m=$T/m-$L-$E-f32
    tiny "$m" --layers "$L" --heads "$H" --embd "$E" --ctx "$C"
    smp() {
        run 60 "$KV" generate -m "$m" --dtype f32 --cache-dtype f32 --prompt-ids $IDS -n $SAMPLED \
            --temp 0.9 --top-k 40 --top-p 0.95 --seed 7 -q --output ids --device "$@"
    }
    smp cpu && cp "$T/stdout" "$T/ids-cpu"
    if ! failed "sampled $SAMPLED tokens (CPU run)"; then
        for ks in fast basic; do
            name="sampled $SAMPLED tokens ${L}x${E} f32, seed 7, $ks kernels"
            smp cuda --gpu-kernels $ks
            failed "$name" || judged "$name" ids "$T/stdout" "$T/ids-cpu" $SAMPLED
        done
    fi
fi

if section forced "every step against the CPU ($PROMPT-token prompt, then $FORCE forced ids)"; then
    # the same ids fed to both backends, the logits of the prefill and of each decode step compared
    # (on a GPU: more than 256 positions of context, several attention chunks, step replay).
    # Limits: 1e-4 for f32 weights and cache (accumulation order); 3e-2 (the self-test's bf16 limit)
    # where weights or cache are 16-bit or int8, 5e-2 for q8 weights
    read -r L H E C <<<"$FORCED_MODEL"
    m=$T/m-forced
    tiny "$m" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --seed 5
    P=$("$PY" -c "print(','.join(str((i * 7919 + 13) % 50257) for i in range($PROMPT)))")
    F=$("$PY" -c "print(','.join(str((i * 104729 + 7) % 50257) for i in range($FORCE)))")
    for plan in "${FORCED_RUNS[@]}"; do
        read -r wdt layout cdt sets <<<"$plan"
        limit=3e-2
        [ $wdt = q8 ] && limit=5e-2
        [ $wdt = f32 ] && [ $cdt = f32 ] && limit=1e-4
        tf() {
            run 90 "$KV" generate -m "$m" --dtype $wdt --cache-layout $layout --cache-dtype $cdt \
                --ctx $FORCED_WINDOW --prompt-ids "$P" --force-ids "$F" -q --device "$@"
        }
        rm -f "$T/tf-cpu.bin"
        tf cpu --dump-logits "$T/tf-cpu.bin"
        failed "forced steps $wdt weights, $layout $cdt cache (CPU run)" && continue
        for ks in ${sets//,/ }; do
            name="forced steps $wdt weights, $layout $cdt cache, $ks (limit $limit)"
            rm -f "$T/tf-cuda.bin"
            tf cuda --gpu-kernels $ks --dump-logits "$T/tf-cuda.bin"
            failed "$name" ||
                judged "$name" logits "$T/tf-cuda.bin" "$T/tf-cpu.bin" $limit $((FORCE + 1))
        done
    done
    # the same through the chat engine: two conversations fed recorded ids (replay --verify
    # --dump-logits), evicting in their window and, in a small pool, offloaded to pinned memory
    m=$T/m-chat
    tiny "$m" --layers 2 --heads 2 --embd 32 --ctx 128 --seed 3
    for plan in "${CHAT_FORCED[@]}"; do
        read -r wdt window per_reply pool ks <<<"$plan"
        limit=3e-2
        [ $wdt = f32 ] && limit=1e-4
        name="forced chat, eviction and offload, $wdt weights, $ks kernels (limit $limit)"
        rm -f "$T/src.jsonl" "$T/forced.jsonl" "$T/fc-cpu.bin" "$T/fc-cuda.bin"
        run 60 sh -c "printf 'hi\n' | '$KV' chat --no-tui -m '$m' --device cpu -n 2 --ctx $window \
            --session '$T/src.jsonl'"
        failed "$name (its session)" && continue
        "$PY" tests/forced_session.py "$T/src.jsonl" "$T/forced.jsonl" $wdt $per_reply
        run 90 "$KV" replay "$T/forced.jsonl" --verify -m "$m" --device cpu --cache-mem $pool \
            --dump-logits "$T/fc-cpu.bin"
        failed "$name (CPU run)" && continue
        run 120 "$KV" replay "$T/forced.jsonl" --verify -m "$m" --device cuda --gpu-kernels $ks \
            --cache-mem $pool --dump-logits "$T/fc-cuda.bin"
        failed "$name" && continue
        if ! grep -qE 'evicted [1-9][0-9]* times and went to host memory [1-9]' "$T/stdout"; then
            row FAIL "$name" "did not evict and go to host memory: $(tail -1 "$T/stdout")"
        else
            judged "$name" logits "$T/fc-cuda.bin" "$T/fc-cpu.bin" $limit $((6 * per_reply))
        fi
    done
fi

if section chat "cache layouts, dtypes, eviction and offload (greedy chat, f32 weights)"; then
    m=$T/m-2-64-f32
    tiny "$m" --layers 2 --heads 4 --embd 64 --ctx 128
    msgs=$'hello there\nhow are you\ntell me about the cache'
    [ $EMULATED = 1 ] || msgs+=$'\nand more\nand then\none more turn'
    for opts in "${CHAT_OPTS[@]}"; do
        talk() {
            run 90 sh -c "echo '$msgs' | '$KV' chat --no-tui --no-save -m '$m' --dtype f32 \
                --cache-dtype f32 -n $CHAT_TOKENS --temp 0 $opts $*"
        }
        talk --device cpu && cp "$T/stdout" "$T/chat-cpu"
        failed "chat $opts (CPU run)" && continue
        talk --device cuda --gpu-kernels $CHAT_SET
        failed "chat $opts" && continue
        if [ ! -s "$T/stdout" ]; then row FAIL "chat $opts" "no replies"
        elif cmp -s "$T/stdout" "$T/chat-cpu"; then
            row ok "chat $opts" "the CPU's replies ($CHAT_SET)"
        else
            why=$(diff "$T/chat-cpu" "$T/stdout" | head -3 | tr '\n' ' ')
            row FAIL "chat $opts" "not the CPU's replies: ${why:0:120}"
        fi
    done
    # where the replies read (--attention 1: every decode step's weight per turn, from the decode
    # kernel's probe) through evictions and a pin, against the CPU's
    name="attention per turn, eviction and a pin, $CHAT_SET kernels" ran=1
    for dev in cpu cuda; do
        [ $ran = 1 ] || break
        run 90 sh -c "printf '%s\n' 'hello there' 'how are you' '/pin 2' 'tell me about it' more |
            '$KV' chat --no-tui --no-save -m '$m' --dtype f32 --cache-dtype f32 -n 8 --temp 0 \
            --template none --keep 3 --ctx 40 --attention 1 --force --events '$T/att-$dev.jsonl' \
            --device $dev $([ $dev = cuda ] && echo "--gpu-kernels $CHAT_SET")"
        failed "$name ($dev run)" && ran=0
    done
    if [ $ran = 1 ]; then
        v=$("$PY" tests/gpu/same_reading.py "$T/att-cpu.jsonl" "$T/att-cuda.jsonl" 1e-4)
        row "${v%% *}" "$name" "${v#* }"
    fi
fi

# compute-sanitizer on PATH, else where the CUDA toolkit puts it (its bin is often not on PATH)
find_sanitizer() {
    local d
    command -v compute-sanitizer && return
    for d in ${CUDA_HOME:+"$CUDA_HOME"/bin "$CUDA_HOME"/compute-sanitizer} \
        /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer \
        /usr/local/cuda-*/bin /usr/local/cuda-*/compute-sanitizer; do
        [ -x "$d/compute-sanitizer" ] && echo "$d/compute-sanitizer" && return
    done
    return 1
}

if section sanitizer "NVIDIA's compute-sanitizer on the unit tests (quick sizes)"; then
    if ! SANITIZER=$(find_sanitizer); then
        if [ $EMULATED = 1 ]; then
            row skip "compute-sanitizer" "not on this machine (the emulated build runs under ASan)"
        else
            row incomplete "compute-sanitizer" "not found on this machine"
        fi
    else
        for plan in "${SANITIZER_RUNS[@]}"; do
            read -r tool limit filters <<<"$plan"
            name="compute-sanitizer $tool ($filters)"
            run "$limit" env KVCHAT_TEST_QUICK=1 "$SANITIZER" --tool "$tool" \
                --error-exitcode 9 "$UT" $filters
            cat "$T/stdout" "$T/stderr" >"$T/sanitizer.log"
            judged "$name" sanitizer "$tool" "$T/sanitizer.log" "$RC"
            grep -E '^=+ (Invalid|Race|Error|.*hazard)' "$T/sanitizer.log" | head -50 \
                >>"$OUT/logs.txt"
        done
    fi
fi

if [ $EMULATED = 1 ]; then # the emulated device's own reports, wherever a run printed one
    reports=$(grep -E 'AddressSanitizer|runtime error|cuda-emu:' "$OUT/logs.txt" |
        grep -v 'CUDA_EMU_FAULT' | sort -u | head -3 | tr '\n' ' ' | cut -c1-200)
    if [ -n "$reports" ]; then
        row FAIL "emulator: no sanitizer report or device error" "$reports"
    else
        row ok "emulator: no sanitizer report or device error" "in any run"
    fi
fi
echo
echo "total $SECONDS s of a budget of $BUDGET s" | tee -a "$OUT/check.txt"
skipped=$([ $SKIP = 0 ] || echo ", $SKIP skipped")
echo "$PASS passed, $FAIL failed, $INCOMPLETE incomplete$skipped" | tee -a "$OUT/check.txt"
[ $FAIL = 0 ] && [ $INCOMPLETE = 0 ]
