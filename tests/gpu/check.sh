#!/usr/bin/env bash
# The GPU check: the CUDA backend against the CPU backend (its reference), end to end at every GPT-2
# shape and kernel by kernel, under NVIDIA's sanitizers, and its speed against the targets.
#
#   tests/gpu/check.sh BUNDLE       on a machine with an NVIDIA GPU, from a bundle (a folder, or
#                                   the .tar.xz beside it) that tests/gpu/bundle.sh built elsewhere
#   tests/gpu/check.sh --emulated   on the emulated device (make emu, CUDA_EMU_STRICT=1), quick:
#                                   small shapes, a few steps, no speed targets; make test runs it,
#                                   and again with a fault planted in one kernel (CUDA_EMU_FAULT),
#                                   where it must fail
#   --only LIST    some of the sections, in this order: smoke,correct,twins,speed,shapes,chat,
#                  speculative,sanitizer
#   --budget S     seconds for the whole check (default 240 on a GPU, 900 emulated); a run stopped
#                  by its own limit or by the budget is "incomplete"
#
# Two verdicts: correctness (PASS, FAIL or incomplete: every row but the speed targets) and speed
# (each target met or missed; never a failure of the check). Prints a table of rows "ok|FAIL|
# incomplete|info|skip|met|missed NAME  DETAIL", the two verdicts, and closes with "N passed, N
# failed, N incomplete" (the correctness rows); exits 0 only when correctness is PASS.
# OUT=DIR keeps check.txt (the table, written as it grows), check.json (both verdicts and every
# row), speed.txt and the bench JSON, and logs.txt (every run's command and stderr).
set -u
cd "$(dirname "$0")/../.."
usage() { # usage [STATUS]: the options (on stdout for --help)
    echo "usage:"
    sed -n '5,14p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-2}"
} >&"$([ "${1:-2}" = 0 ] && echo 1 || echo 2)"
die() { echo "check: $*" >&2; exit 2; }

ALL=smoke,correct,twins,speed,shapes,chat,speculative,sanitizer
EMULATED=0 BUNDLE= ONLY=$ALL BUDGET=
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
    case ,$ALL, in
    *,$s,*) ;;
    *) die "--only: no section '$s'" ;;
    esac
done
case ${BUDGET:-1} in '' | *[!0-9]*) die "--budget: '$BUDGET' is not a number of seconds" ;; esac
PY=${PYTHON:-python3}
JUDGE="$PY tests/gpu/judge.py"

# big scratch (the 1.5B shape is 3.1 GB) in memory where there is room
scratch=/tmp
[ -w /dev/shm ] && [ "$(df -k --output=avail /dev/shm | tail -1)" -gt 8000000 ] && scratch=/dev/shm
T=$(mktemp -d "$scratch/kvchat-check-XXXXXX")
trap 'rm -rf "$T"' EXIT
if [ $EMULATED = 1 ]; then
    [ -z "$BUNDLE" ] || die "--emulated takes no bundle"
    KV=build/emu/kvchat UT=build/emu/unit_tests
    [ -x $KV ] && [ -x $UT ] || die "$KV and $UT not found: make emu"
    BUDGET=${BUDGET:-900}
    # the emulator's stricter modes (random poison, pinned copies at the call, streams in any
    # order their events allow: tests/cuda_emu/README.md), unless the caller chose
    export CUDA_EMU_STRICT=${CUDA_EMU_STRICT:-1}
else
    [ -n "$BUNDLE" ] || usage
    if [ -f "$BUNDLE" ]; then # the bundle as it travels: unpacked here (in memory if there is room)
        tar -xf "$BUNDLE" -C "$T" 2>"$T/tar.err" ||
            die "$BUNDLE: not a bundle archive ($(head -1 "$T/tar.err"))"
        BUNDLE=$(find "$T" -mindepth 2 -maxdepth 2 -name COMMIT -printf '%h\n' | head -1)
        [ -n "$BUNDLE" ] || die "the archive holds no bundle (no COMMIT file)"
    fi
    KV=$BUNDLE/kvchat UT=$BUNDLE/unit_tests
    [ -x "$KV" ] && [ -x "$UT" ] ||
        die "$BUNDLE is not a bundle (no kvchat and unit_tests): tests/gpu/bundle.sh makes one"
    nvidia-smi -L >/dev/null 2>&1 ||
        die "no NVIDIA GPU here (nvidia-smi -L); --emulated runs the check on the emulated device"
    BUDGET=${BUDGET:-240}
    export KVCHAT_ASSETS=$BUNDLE/assets
fi
DEADLINE=$((SECONDS + BUDGET))
OUT=${OUT:-$T/out}
mkdir -p "$OUT"
: >"$OUT/check.txt"
: >"$OUT/logs.txt"
: >"$T/rows"
# the raw figures: no first-use self-test moving a model to the CPU (the self-test has its own rows)
export KVCHAT_SELFTEST=0 XDG_CACHE_HOME=$T/cache
PASS=0 FAIL=0 INCOMPLETE=0 SKIP=0 SECTION= DEVICE_RUNS=0

# row VERDICT NAME DETAIL: one line of the table, counted (met and missed: speed, not counted)
row() {
    case $1 in
    ok) PASS=$((PASS + 1)) ;;
    FAIL) FAIL=$((FAIL + 1)) ;;
    incomplete) INCOMPLETE=$((INCOMPLETE + 1)) ;;
    skip) SKIP=$((SKIP + 1)) ;;
    esac
    printf '%-10s %-62s %s\n' "$1" "$2" "$3" | tee -a "$OUT/check.txt"
    printf '%s\t%s\t%s\t%s\n' "$SECTION" "$1" "$2" "$3" >>"$T/rows"
}
# run LIMIT CMD...: CMD with its stdout in $T/stdout, its stderr in $T/stderr (and logs.txt),
# stopped after LIMIT seconds or at the budget; RC is its exit status (124: stopped, or not started)
run() {
    local limit=$1 left=$((DEADLINE - SECONDS))
    shift
    [ "$left" -lt "$limit" ] && limit=$left
    echo "\$ $*" >>"$OUT/logs.txt"
    case " $* " in *" --device cuda "* | *" cuda/"*) DEVICE_RUNS=$((DEVICE_RUNS + 1)) ;; esac
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
    SECTION=$1
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
# cases WHAT LIMIT MODEL SELFTEST-ARGS...: kvchat selftest --cases, one process, its rows taken
# as they are; a run stopped or broken says so after the rows it printed
cases() {
    local what=$1 limit=$2 m=$3 v name detail n
    shift 3
    run "$limit" "$KV" selftest -m "$m" --device cuda "$@"
    n=0 nfail=0
    while IFS=$'\t' read -r v name detail; do
        row "$v" "$what: $name" "$detail"
        n=$((n + 1))
        [ "$v" = FAIL ] && nfail=$((nfail + 1))
    done < <(grep -E $'^(ok|FAIL|info)\t' "$T/stdout")
    # exit 1 is a failed comparison, or a run that broke (its error on stderr)
    case $RC in
    0) [ $n -gt 0 ] || row FAIL "$what" "no rows (exit 0)" ;;
    1) [ $nfail -gt 0 ] ||
        row FAIL "$what" "exit 1 after $n rows: $(tail -1 "$T/stderr" | cut -c1-160)" ;;
    124 | 137) row incomplete "$what: the cases after these $n rows" "stopped at its limit" ;;
    *) row FAIL "$what" "exit $RC after $n rows: $(tail -1 "$T/stderr" | cut -c1-160)" ;;
    esac
}

# what each mode runs: the shapes, cases and lengths
IDS=464,3290,373,1043,287,257,2214,50256,0,31373,995,13
if [ $EMULATED = 1 ]; then
    CORRECT_MODEL="2 4 64 128" CORRECT_LEN="--prompt 12 --force 3 --greedy 3"
    CORRECT_CASES=f32/paged/f32/fast,f32/paged/f32/basic,f32/contiguous/int8/basic
    CORRECT_CASES+=,bf16/paged/bf16/fast,bf16/paged/bf16/basic,q8/paged/f16/basic,q4/paged/f16/fast
    # the 124M shape: one case, its prefill and two forced steps take about half a minute here
    SHAPES=("124M 12 12 768 1024") SHAPE_CASES=bf16/paged/bf16/fast
    SHAPE_LEN="--prompt 16 --force 2 --greedy 2 --no-gate"
    SAMPLED=3 SAMPLED_MODEL="2 4 64 128"
    CHAT_FORCED=("f32 40 12 24K basic")
    CHAT_OPTS=("--cache-layout contiguous --cache-dtype int8" "--ctx 32 --evict-min 8")
    CHAT_TOKENS=3 CHAT_SET=basic
    SANITIZER_RUNS=("memcheck 60 cuda/quantised" "racecheck 60 cuda/kernels")
    SPEC_MODEL="2 4 64 128" SPEC_TOKENS=8
else
    # the 124M shape, every step of a teacher-forced decode past 256 positions of context (several
    # attention chunks, step replay): each cache dtype on both kernel sets, the contiguous layout,
    # 16-bit, q8 and q4 weights
    CORRECT_MODEL="12 12 768 1024" CORRECT_LEN="--prompt 300 --force 64 --greedy 16"
    CORRECT_CASES=f32/paged/f32/fast,f32/paged/f32/basic,f32/paged/f16/fast,f32/paged/f16/basic
    CORRECT_CASES+=,f32/paged/bf16/fast,f32/paged/bf16/basic,f32/paged/int8/fast
    CORRECT_CASES+=,f32/paged/int8/basic,f32/contiguous/f32/fast,f32/contiguous/int8/fast
    CORRECT_CASES+=,f16/paged/f32/fast,bf16/paged/bf16/fast,bf16/paged/bf16/basic
    CORRECT_CASES+=,bf16/paged/f32/fast,q8/paged/f16/fast,q8/paged/f16/basic,q4/paged/f16/fast
    CORRECT_CASES+=,q4/paged/f16/basic
    SHAPES=("355M 24 16 1024 1024" "774M 36 20 1280 1024" "1.5B 48 25 1600 1024")
    SHAPE_CASES=bf16/paged/bf16/fast,f32/paged/f32/fast
    SHAPE_LEN="--prompt 140 --force 8 --greedy 4"
    SAMPLED=48 SAMPLED_MODEL="4 8 256 512"
    CHAT_FORCED=("f32 128 48 96K fast" "bf16 128 48 96K fast")
    CHAT_OPTS=("--cache-layout contiguous --prealloc" "--ctx 64 --evict-min 8"
        "--ctx 64 --evict shift" "--ctx 64 --cache-mem 256K")
    CHAT_TOKENS=12 CHAT_SET=fast
    # small filters and the quick sizes (KVCHAT_TEST_QUICK): the tools slow kernels tenfold or more
    SANITIZER_RUNS=("memcheck 45 cuda/" "racecheck 35 cuda/attention cuda/sample cuda/fused")
    SPEC_MODEL="12 12 768 1024" SPEC_TOKENS=64
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
    if [ -n "$missing" ]; then
        SECTION=smoke
        row FAIL "bundle: every library it needs is found" "$missing"
    fi
fi

if section smoke "one device process: does it start, and what does a start cost"; then
    tiny "$T/m-2-64-f32" --layers 2 --heads 4 --embd 64 --ctx 128
    t0=$(date +%s%N)
    cases "smoke" 60 "$T/m-2-64-f32" --cases f32/paged/f32/basic --prompt 8 --force 1 --greedy 1
    ms=$((($(date +%s%N) - t0) / 1000000))
    row info "start: one device process, a tiny model" \
        "$((ms / 1000)).$(printf %03d $((ms % 1000))) s wall"
fi

if section correct "the 124M shape against the CPU: prefill, forced steps, greedy, self-test"; then
    read -r L H E C <<<"$CORRECT_MODEL"
    tiny "$T/m-correct" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --seed 5
    cases "${L}x$E" $([ $EMULATED = 1 ] && echo 240 || echo 100) "$T/m-correct" \
        --cases $CORRECT_CASES $CORRECT_LEN
    [ $EMULATED = 1 ] || rm -rf "$T/m-correct"
fi

if section twins "every kernel against its CPU twin ($UT cuda/)"; then
    run $([ $EMULATED = 1 ] && echo 240 || echo 60) "$UT" cuda/
    out=$T/stdout
    names="kernels_match_cpu_twins fused_matches_cpu_twin fused_tokens_are_steps
        quantised_match_cpu_twin attention_matches_cpu_twin sample_matches_cpu_twin
        model_steps_match_cpu
        speculative_matches_cpu speculative_exact_on_device driver_messages"
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

# speed: report.py's verdicts are targets met or missed, never correctness rows
speed_rows() {
    local v rest
    [ -s "$T/verdicts" ] || echo "FAIL speed report: $(tail -1 "$OUT/speed.txt")" >"$T/verdicts"
    while read -r v rest; do
        case $v in ok) v=met ;; *) v=missed ;; esac
        [ $EMULATED = 1 ] && [ $v = missed ] && v=FAIL # quick: the figures are all there, or not
        row "$v" "speed: ${rest%%: *}" "${rest#*: }"
    done <"$T/verdicts"
}
if section speed "speed ($KV bench --device cuda: each step's device time by CUDA events)"; then
    rm -f "$OUT"/b124.json "$OUT"/b124-basic.json "$OUT"/b1558.json "$T/verdicts"
    if [ $EMULATED = 1 ]; then
        tiny "$T/m-2-64-bf16" --layers 2 --heads 4 --embd 64 --ctx 128 --dtype bf16
        run 120 "$KV" bench -m "$T/m-2-64-bf16" --device cuda --gpu-kernels basic --dtype bf16 \
            --runs 1 --prefill 16 --context 0,8 --json "$OUT/b124.json"
        failed "bench, the tiny model, basic kernels"
        report=(--small "$OUT/b124.json" --contexts 0,8 --prefills 16 --no-targets)
    else
        tiny "$T/m124" --layers 12 --heads 12 --embd 768 --ctx 1024 --dtype bf16
        run 40 "$KV" bench -m "$T/m124" --device cuda --dtype bf16 --runs 5 --prefill 128,768,1024 \
            --context 0,512,1000 --json "$OUT/b124.json"
        failed "bench, 124M shape, fast kernels"
        run 30 "$KV" bench -m "$T/m124" --device cuda --gpu-kernels basic --dtype bf16 --runs 3 \
            --prefill 128 --context 0,512,1000 --json "$OUT/b124-basic.json"
        failed "bench, 124M shape, basic kernels"
        # what four bits buy on the device: q4 decode against q8's (not a target yet)
        run 30 "$KV" bench -m "$T/m124" --device cuda --dtype q8,q4 --runs 3 --prefill 128 \
            --context 0,512
        failed "bench, 124M shape, q8 and q4" || sed 's/^/  /' "$T/stdout" >>"$OUT/check.txt"
        rm -rf "$T/m124"
        # kept for the shapes section
        tiny "$T/m-1.5B" --layers 48 --heads 25 --embd 1600 --ctx 1024 --dtype bf16
        run 40 "$KV" bench -m "$T/m-1.5B" --device cuda --dtype bf16 --runs 3 --prefill 128 \
            --context 0,512 --json "$OUT/b1558.json"
        failed "bench, 1.5B shape"
        report=(--small "$OUT/b124.json" --large "$OUT/b1558.json" --basic "$OUT/b124-basic.json")
    fi
    # the floor's copy bandwidth and transformers' rate are measured with torch: in the budget too
    run 60 "$PY" tests/gpu/report.py --verdicts "$T/verdicts" "${report[@]}"
    cat "$T/stdout" "$T/stderr" >"$OUT/speed.txt"
    [ $RC = 0 ] || echo "report.py: exit $RC" >>"$OUT/speed.txt"
    sed 's/^/  /' "$OUT/speed.txt" | tee -a "$OUT/check.txt"
    speed_rows
fi

if section shapes "every GPT-2 shape against the CPU (random weights: prefill, steps, greedy)"; then
    for shape in "${SHAPES[@]}"; do
        read -r name L H E C <<<"$shape"
        m=$T/m-$name
        tiny "$m" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --dtype bf16
        [ -d "$m" ] || continue
        cases "$name" $([ $EMULATED = 1 ] && echo 120 || echo 60) "$m" --cases $SHAPE_CASES \
            $SHAPE_LEN
        rm -rf "$m"
    done
fi

if section chat "the chat engine: layouts, eviction, offload, sampling (against the CPU)"; then
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
    # two conversations fed recorded ids (replay --verify --dump-logits), evicting in their window
    # and, in a small pool, offloaded to pinned memory
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
    # greedy replies, the CPU's and the device's, across layouts, eviction and offload
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

# speculative decoding's promise on the device: greedy with a drafter is plain greedy decoding's
# reply token for token, for each weight type (verify passes take the decode step's kernels)
if section speculative "speculative decoding on the device: greedy = plain greedy, each dtype"; then
    read -r L H E C <<<"$SPEC_MODEL"
    tiny "$T/m-spec" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --seed 5
    for dt in f32 bf16 q8 q4; do
        [ -d "$T/m-spec" ] || break
        spec=(generate -m "$T/m-spec" --device cuda --dtype $dt --temp 0 --repeat-penalty 1.1
            -n $SPEC_TOKENS --output ids -q -p "Prompt number 7: the quick brown fox 259 jumps")
        run 60 "$KV" "${spec[@]}"
        failed "speculative: $dt, plain" && continue
        plain=$(cat "$T/stdout")
        for d in self-q8 lookup; do
            run 60 "$KV" "${spec[@]}" --draft $d --draft-max 8
            failed "speculative: $dt, $d" && continue
            got=$(cat "$T/stdout")
            if [ -n "$plain" ] && [ "$got" = "$plain" ]; then
                row ok "speculative: $dt weights, $d drafting" "the plain greedy reply"
            else
                first=$(paste -d' ' <(tr ', ' '\n\n' <<<"$plain") <(tr ', ' '\n\n' <<<"$got") |
                    awk '$1 != $2 { print NR; exit }')
                row FAIL "speculative: $dt weights, $d drafting" \
                    "parts from plain greedy at token ${first:-?} of $SPEC_TOKENS"
            fi
        done
    done
    if [ $EMULATED = 0 ] && [ -d "$T/m-spec" ]; then # what a verify pass costs (not a target)
        run 60 "$KV" bench --speculative -m "$T/m-spec" --device cuda --dtype bf16 \
            --draft lookup,self-q8 -n 64 --runs 3
        failed "speculative: bench" ||
            row info "speculative: bench, bf16" "$(grep -m1 'a decode step' "$T/stdout")"
        sed 's/^/  /' "$T/stdout" >>"$OUT/check.txt"
    fi
    rm -rf "$T/m-spec"
fi

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
    SECTION=emulator
    reports=$(grep -E 'AddressSanitizer|runtime error|cuda-emu:' "$OUT/logs.txt" |
        grep -v 'CUDA_EMU_FAULT' | sort -u | head -3 | tr '\n' ' ' | cut -c1-200)
    if [ -n "$reports" ]; then
        row FAIL "emulator: no sanitizer report or device error" "$reports"
    else
        row ok "emulator: no sanitizer report or device error" "in any run"
    fi
fi
echo
echo "total $SECONDS s of a budget of $BUDGET s; $DEVICE_RUNS device processes" |
    tee -a "$OUT/check.txt"
$JUDGE summary "$T/rows" "$OUT/check.json" "$SECONDS" "$BUDGET" "$DEVICE_RUNS" |
    tee -a "$OUT/check.txt"
skipped=$([ $SKIP = 0 ] || echo ", $SKIP skipped")
echo "$PASS passed, $FAIL failed, $INCOMPLETE incomplete$skipped" | tee -a "$OUT/check.txt"
[ $FAIL = 0 ] && [ $INCOMPLETE = 0 ]
