# Shared by the shell test suites: counters, checks, and a temporary directory.
# Each check prints "ok   NAME" or "FAIL NAME: why"; run.sh adds up the counts.

PASS=${PASS:-0}
FAIL=${FAIL:-0}
SKIP=${SKIP:-0}
TMP=${TMP:-$(mktemp -d /tmp/kvchat-test-XXXXXX)}

pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }
skip() { SKIP=$((SKIP + 1)); echo "skip $1: $2"; }

# check NAME CMD...: passes when CMD exits 0
check() {
    local name=$1
    shift
    local out
    if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "exit $?: $(echo "$out" | tail -3 | tr '\n' ' ')"; fi
}

# expect_error NAME CODE PATTERN CMD...: CMD must exit CODE with exactly one line on stderr that
# matches PATTERN (grep -E), and no sanitizer report.
expect_error() {
    local name=$1 code=$2 pattern=$3
    shift 3
    "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    local rc=$? lines
    lines=$(wc -l <"$TMP/err")
    if [ "$rc" != "$code" ]; then
        fail "$name" "exit $rc, want $code; stderr: $(head -c 300 "$TMP/err")"
    elif grep -qE 'AddressSanitizer|runtime error|LeakSanitizer' "$TMP/err"; then
        fail "$name" "sanitizer report: $(grep -m1 -E 'ERROR|runtime error' "$TMP/err")"
    elif [ "$lines" != 1 ]; then
        fail "$name" "$lines lines on stderr, want 1: $(head -c 300 "$TMP/err")"
    elif ! grep -qE -- "$pattern" "$TMP/err"; then
        fail "$name" "stderr lacks /$pattern/: $(cat "$TMP/err")"
    else
        pass "$name"
    fi
}

# await WHAT COND: waits for the shell condition COND (eval'd: it sees the caller's variables and
# locals, but $1.. are await's own) to hold, polling every 0.1 s, for
# up to $WAIT_MAX seconds (default 180: far past what a loaded machine takes, so it never decides a
# test, and it ends a hang); past that it says what it waited for on stderr and returns 1
await() {
    local what=$1 cond=$2 end=$((SECONDS + ${WAIT_MAX:-180}))
    until eval "$cond"; do
        if [ "$SECONDS" -ge "$end" ]; then
            echo "gave up after ${WAIT_MAX:-180} s waiting for $what" >&2
            return 1
        fi
        sleep 0.1
    done
}

# same_output NAME EXPECTED ACTUAL
same() {
    if [ "$2" == "$3" ]; then pass "$1"; else fail "$1" "want '$(echo "$2" | head -c 200)' got '$(echo "$3" | head -c 200)'"; fi
}

# rel_err C.bin REF.npy: relative L2 distance of kvchat's --dump-logits from a NumPy reference's
rel_err() {
    "$PYTHON" -c "import numpy as np, sys
a = np.fromfile(sys.argv[1], '<f4').astype(np.float64); r = np.load(sys.argv[2])
print('%.3g' % (np.linalg.norm(a - r) / np.linalg.norm(r)) if a.shape == r.shape else 'shape-mismatch')" "$1" "$2"
}
under() { "$PYTHON" -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$1" "$2" 2>/dev/null; }
