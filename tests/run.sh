#!/usr/bin/env bash
# The whole test suite (make test): C unit tests, the same under AddressSanitizer/UBSan, the CLI and
# bad-input suites (again under the sanitizers), the NumPy reference and tokenizer corpus.
# Ends with one line: "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export PYTHON=${PYTHON:-/usr/bin/python3}
export TMP=$(mktemp -d /tmp/kvchat-test-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
. tests/lib.sh

unit() { # runs a unit-test binary and counts its ok/FAIL lines
    local bin=$1 tag=$2 out rc failed
    out=$("$bin" "${@:3}" 2>&1)
    rc=$?
    echo "$out" | grep -E '^(ok|FAIL|skip|     )' | sed "s/^ok   /ok   $tag/; s/^FAIL /FAIL $tag/; s/^skip /skip $tag/"
    failed=$(echo "$out" | grep -c '^FAIL ')
    PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
    FAIL=$((FAIL + failed))
    SKIP=$((SKIP + $(echo "$out" | grep -c '^skip ')))
    if ! echo "$out" | grep -q '^unit: '; then
        fail "$tag(crashed)" "$(echo "$out" | tail -5 | tr '\n' ' ')"
    elif [ "$rc" != 0 ] && [ "$failed" = 0 ]; then # a sanitizer's report at exit (LeakSanitizer's leaks)
        fail "$tag(exit status $rc after the tests)" "$(echo "$out" | grep -m3 -E 'ERROR|SUMMARY|leak' | tr '\n' ' ')"
    fi
}

# how long each stage took, on stderr (CI has a 20-minute budget; this shows where it goes)
STAGE_T=$SECONDS
took() {
    echo "time $1: $((SECONDS - STAGE_T)) s" >&2
    STAGE_T=$SECONDS
}

export ASAN_OPTIONS=detect_leaks=1
# every event emitted is held to model/event_schema.h (a breach aborts the test that made it)
export KVCHAT_CHECK_EVENTS=1
# the suite runs on the CPU backend (the reference); tests/gpu/check.sh is the GPU's
export KVCHAT_DEVICE=cpu
# The CUDA twins run on the emulated device (tests/cuda_emu: build/emu, under the sanitizers,
# through tests/gpu/check.sh --emulated below); on a real GPU's build only where there is one.
no_gpu=-cuda/
nvidia-smi -L >/dev/null 2>&1 && no_gpu=

# The emulated device proves itself, the CUDA twins run on it traced and strict, the GPU check runs
# on it (and is checked), and its bundle is built here: in the background, beside the suites below
# (the emulator runs on one core, and the ThreadSanitizer run is pinned to the other), in a TMP of
# their own (tests/lib.sh's helpers keep a command's output in $TMP/out and $TMP/err: shared, a
# background check's could land between a suite's command and its look at them). Their lines and
# counts join the rest at the end.
emu_suites() {
    local counts=$TMP/emu.counts
    TMP=$TMP/emu
    mkdir -p "$TMP"
    PASS=0 FAIL=0 SKIP=0
    . tests/cuda_emu/test_planted.sh
    took test_planted
    # the twins with every load and store traced, strict: lost updates and never-written reads
    CUDA_EMU_STRICT=1 unit "$BUILD/emu/traced/unit_tests" "emu-traced:" cuda/
    took emu-traced-unit
    . tests/gpu/test_check.sh
    took test_check
    KV=$BUILD/kvchat
    . tests/gpu/test_bundle.sh
    took test_bundle
    echo "$PASS $FAIL $SKIP" >"$counts"
}
emu_suites >"$TMP/emu.out" 2>"$TMP/emu.err" </dev/null &
emu_pid=$!
unit "$BUILD/unit_tests" "" $no_gpu
took unit
unit "$BUILD/asan/unit_tests" "asan:" -cuda/
took asan-unit
# where threads meet (the engine's worker, the calls made while it runs), under ThreadSanitizer on
# one core: OpenMP's uninstrumented barriers would read as races (make tsan)
# (quick: the allocation-failure sweep fails every 16th allocation, not each: 4 minutes less)
TSAN_OPTIONS=halt_on_error=1 KVCHAT_TEST_QUICK=1 unit taskset "tsan:" -c 0 "$BUILD/tsan/unit_tests" \
    engine/ ui/
took tsan-unit

for suite in tests/test_cli.sh tests/test_chat.sh tests/test_session.sh tests/test_recorded.sh \
    tests/test_tui.sh tests/test_reference.sh tests/test_pytorch.sh tests/test_download.sh \
    tests/test_tokenizer.sh tests/test_format.sh; do
    KV=$BUILD/kvchat TAG=
    . "$suite"
    took "${suite#tests/}"
done
# bad input, downloads and resume/verify again under the sanitizers: no crash, no leak, same
# messages
KV=$BUILD/asan/kvchat TAG=asan:
. tests/test_bad_input.sh
took asan:test_bad_input
. tests/test_download.sh
took asan:test_download
. tests/test_recorded.sh
took asan:test_recorded
KV=$BUILD/kvchat TAG=
. tests/test_bad_input.sh
took test_bad_input

wait $emu_pid
cat "$TMP/emu.out"
grep '^time ' "$TMP/emu.err" >&2
if read -r p f k <"$TMP/emu.counts" 2>/dev/null; then
    PASS=$((PASS + p)) FAIL=$((FAIL + f)) SKIP=$((SKIP + k))
else
    fail "emulated-device suites (ended early)" "$(tail -3 "$TMP/emu.err" | tr '\n' ' ')"
fi

# real GPT-2 weights, when this machine has them (never in CI)
out=$(bash tests/gpt2_known.sh "$BUILD/kvchat")
echo "$out" | grep -E '^(ok|FAIL|skip) '
PASS=$((PASS + $(echo "$out" | grep -c '^ok ')))
FAIL=$((FAIL + $(echo "$out" | grep -c '^FAIL ')))
SKIP=$((SKIP + $(echo "$out" | grep -c '^skip ')))

echo "$PASS passed, $FAIL failed, $SKIP skipped"
[ "$FAIL" = 0 ]
