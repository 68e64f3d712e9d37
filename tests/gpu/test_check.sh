# The GPU check, checked (sourced by run.sh with TMP and PYTHON): its verdicts on captured and
# made-up sanitizer logs, logits and speed figures; the whole quick check on the emulated device,
# which must pass, and again with a fault planted in one kernel (CUDA_EMU_FAULT), which must fail
# naming the twin test of that kernel; and the sanitizer step through a stand-in compute-sanitizer
# that reports clean, reports errors, or never finishes.

G=$TMP/gpucheck
mkdir -p "$G/bin"
judge() { "$PYTHON" tests/gpu/judge.py "$@" 2>&1 | cut -d' ' -f1; }
S='========= COMPUTE-SANITIZER'
OK1='ok   cuda/quantised_match_cpu_twin'
UNIT="$OK1"$'\nunit: 1 passed, 0 failed, 0 skipped'
MEM0='========= ERROR SUMMARY: 0 errors'
RACE0='========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)'
sanitizer_case() { # NAME WANT TOOL RC LOG-LINES...
    local name=$1 want=$2 tool=$3 rc=$4
    shift 4
    printf '%s\n' "$@" >"$G/s.log"
    same "gpu-check/judge: $name" "$want" "$(judge sanitizer "$tool" "$G/s.log" "$rc")"
}
sanitizer_case "a clean memcheck passes (the old grep failed it)" ok memcheck 0 "$S" "$UNIT" "$MEM0"
sanitizer_case "a clean racecheck passes" ok racecheck 0 "$S" "$UNIT" "$RACE0"
sanitizer_case "one memcheck error fails" FAIL memcheck 9 "$S" \
    '========= Invalid __global__ read of size 4 bytes' "$UNIT" '========= ERROR SUMMARY: 1 error'
sanitizer_case "one hazard fails" FAIL racecheck 9 "$S" "$UNIT" \
    '========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)'
sanitizer_case "racecheck warnings fail" FAIL racecheck 0 "$S" "$UNIT" \
    '========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 2 warnings)'
sanitizer_case "a run stopped at its limit is incomplete" incomplete memcheck 124 "$S" "$OK1"
sanitizer_case "a clean summary after the tests crashed fails" FAIL racecheck 139 \
    "$S" "$OK1" "$RACE0"
sanitizer_case "a clean summary after a failed test fails" FAIL memcheck 1 "$S" \
    'FAIL cuda/quantised_match_cpu_twin: rel err' 'unit: 0 passed, 1 failed, 0 skipped' "$MEM0"
sanitizer_case "no summary fails" FAIL memcheck 0 "$S" "$UNIT"
sanitizer_case "a device the tool refuses is incomplete" incomplete memcheck 1 "$S" \
    '========= Error: Device not supported' 'unit: 0 passed, 1 failed, 0 skipped'

"$PYTHON" - "$G" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
r = np.random.default_rng(1).standard_normal((3, 50257)).astype("<f4")
r.tofile(d + "/ref.bin")
(r * (1 + 1e-6)).tofile(d + "/near.bin")
(r + 0.1).tofile(d + "/far.bin")
r[:2].tofile(d + "/short.bin")
n = r.copy(); n[2, 7] = np.nan; n.tofile(d + "/nan.bin")
EOF
for c in "near ok" "far FAIL" "short FAIL" "nan FAIL" "absent FAIL"; do
    set -- $c
    same "gpu-check/judge: logits, $1" "$2" "$(judge logits "$G/$1.bin" "$G/ref.bin" 1e-4 3)"
done
printf '1 2 3 4\n' >"$G/a"
printf '1 2 9 4\n' >"$G/b"
printf '1 2\n' >"$G/c"
same "gpu-check/judge: ids that part fail, 16-bit ones are info, short ones fail" "FAIL info FAIL" \
    "$(judge ids "$G/b" "$G/a" 4) $(judge ids "$G/b" "$G/a" 4 16bit) \
$(judge ids "$G/c" "$G/a" 4 16bit)"

# the speed report: a missed target and a missing figure are failures
"$PYTHON" - "$G" <<'EOF'
import json, sys
r = {"layers": 12, "weight_bytes_per_token": 2.5e8, "cache_bytes_per_position": 36864,
     "graph_nodes_per_decode_step": 65, "decode_ctx0_tok_s": 7000, "decode_ctx0_wall_tok_s": 6500,
     "decode_ctx512_tok_s": 4000, "decode_ctx1000_tok_s": 6900, "prefill128_tok_s": 4e5,
     "prefill768_tok_s": 5e5, "prefill1024_tok_s": 6e5}
json.dump({"results": [r]}, open(sys.argv[1] + "/b124.json", "w"))
EOF
"$PYTHON" tests/gpu/report.py --verdicts "$G/verdicts" --small "$G/b124.json" \
    --large "$G/absent.json" >"$G/report" 2>&1
v() { grep -c "^$1 .*$2" "$G/verdicts"; }
got="$(v FAIL 'context 512 >= 5000') $(v FAIL '1.5B decode at context 512.*no figure')"
same "gpu-check/report: a missed target, a missing figure and two met targets" "1 1 1 1" \
    "$got $(v ok 'prefill 1024') $(v ok '124M graph')"

# the two verdicts: a missed speed target never fails the check; a failed or incomplete row does
summary() { # ROWS...: the summary's two verdicts, and the JSON's
    printf '%s\n' "$@" >"$G/rows"
    "$PYTHON" tests/gpu/judge.py summary "$G/rows" "$G/summary.json" 9 240 3 |
        sed -E 's/^([a-z]+): ([A-Za-z ]+) \(.*/\2/' | tr '\n' '/'
    "$PYTHON" -c 'import json, sys; j = json.load(open(sys.argv[1]))
print(j["correctness"]["verdict"], j["speed"]["verdict"], len(j["rows"]))' "$G/summary.json"
}
T1=$'correct\tok\tforced\tx' T2=$'speed\tmissed\t124M decode\ty' T3=$'speed\tmet\tnodes\tz'
same "gpu-check/summary: a missed speed target leaves correctness PASS" \
    "PASS/missed/PASS missed 3" "$(summary "$T1" "$T2" "$T3")"
same "gpu-check/summary: a failed row fails correctness, an incomplete one makes it incomplete" \
    "FAIL/met/FAIL met 3|incomplete/met/incomplete met 2" \
    "$(summary "$T1" $'correct\tFAIL\tforced\tx' "$T3")|$(summary $'a\tincomplete\tb\tc' "$T3")"

# the check on the emulated device: the quick check passes; with the layernorm kernel's output wrong
# it fails, in the smoke test's forced steps and naming the kernel's twin test (the two run side by
# side: the emulator uses one core)
CUDA_EMU_FAULT=layernorm_k OUT=$G/fault tests/gpu/check.sh --emulated --only smoke,twins \
    >"$G/fault.out" 2>&1 &
fault_pid=$!
OUT=$G/out tests/gpu/check.sh --emulated >"$G/check.out" 2>&1
rc=$?
# its rows are this suite's: an incomplete one fails
awk '/^(ok|FAIL|incomplete) / {
    v = $1 == "ok" ? "ok  " : "FAIL"; $1 = ""; sub(/^ +/, ""); print v, "emu-check/" $0
}' "$G/check.out"
PASS=$((PASS + $(grep -c '^ok ' "$G/check.out")))
FAIL=$((FAIL + $(grep -c -E '^(FAIL|incomplete) ' "$G/check.out")))
closing=$(tail -1 "$G/check.out" |
    sed -E 's/^[0-9]+ passed, ([0-9]+) failed, ([0-9]+) incomplete.*/\1 \2/')
same "gpu-check/the quick check passes on the emulated device, closing with its count" "0 0 0" \
    "$rc $closing"
same "gpu-check/its JSON says correctness PASS, with every row of the table" "PASS yes" \
    "$("$PYTHON" -c 'import json, sys; j = json.load(open(sys.argv[1]))
kinds = ("ok", "FAIL", "incomplete", "info", "skip", "met", "missed")
rows = sum(1 for l in open(sys.argv[2]) if l.split(" ")[0] in kinds)
print(j["correctness"]["verdict"], "yes" if len(j["rows"]) == rows else "no")' "$G/out/check.json" \
        "$G/out/check.txt")"
wait $fault_pid
rc=$?
named=$(grep -c '^FAIL  *twins: kernels_match_cpu_twins .*layernorm' "$G/fault.out")
forced=$(grep -c -E '^FAIL  *smoke: forced: .*basic kernels  *worst rel L2' "$G/fault.out")
same "gpu-check/with a fault planted in layernorm_k it fails, naming kernels_match_cpu_twins" \
    "1 1 1 yes" "$rc $named $(grep -c '^ok  *twins: quantised_match' "$G/fault.out") \
$([ "$forced" -gt 0 ] && echo yes)"

# the sanitizer step, through a stand-in: what it runs, then the summary it is told to print
cat >"$G/bin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
tool=memcheck
while [ "${1#--}" != "$1" ]; do [ "$1" = --tool ] && tool=$2; shift 2; done
echo "========= COMPUTE-SANITIZER"
"$@"
rc=$?
case $FAKE_SANITIZER in
hang) sleep 60 ;;
errors)
    echo "========= Invalid __global__ write of size 4 bytes"
    if [ $tool = racecheck ]; then
        echo "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"
    else
        echo "========= ERROR SUMMARY: 3 errors"
    fi
    exit 9 ;;
*)
    if [ $tool = racecheck ]; then
        echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    else
        echo "========= ERROR SUMMARY: 0 errors"
    fi ;;
esac
exit $rc
EOF
chmod +x "$G/bin/compute-sanitizer"
sanitized() { # MODE [OPTIONS]: the verdicts of the sanitizer rows
    PATH=$G/bin:$PATH FAKE_SANITIZER=$1 tests/gpu/check.sh --emulated --only sanitizer "${@:2}" \
        2>&1 |
        grep -E '^[a-zA-Z]+ +compute-sanitizer' | awk '{print $1}' | tr '\n' ' '
}
got="$(sanitized clean)|$(sanitized errors)|$(sanitized hang --budget 4)"
same "gpu-check/sanitizer step: clean, errors, never finishing" \
    "ok ok |FAIL FAIL |incomplete incomplete " "$got"
# found in the CUDA toolkit's folder when it is not on PATH (as a toolkit install leaves it)
mkdir -p "$G/cuda/bin"
mv "$G/bin/compute-sanitizer" "$G/cuda/bin/compute-sanitizer"
got=$(CUDA_HOME=$G/cuda FAKE_SANITIZER=clean tests/gpu/check.sh --emulated --only sanitizer 2>&1 |
    grep -E '^[a-zA-Z]+ +compute-sanitizer' | awk '{print $1}' | tr '\n' ' ')
same "gpu-check/sanitizer found in \$CUDA_HOME/bin, off PATH" "ok ok " "$got"
mv "$G/cuda/bin/compute-sanitizer" "$G/bin/compute-sanitizer"

# bad input: one line naming the problem, exit status 2
expect_error "gpu-check/an unknown section is refused" 2 "no section 'bogus'" \
    tests/gpu/check.sh --emulated --only bogus
expect_error "gpu-check/a budget that is no number is refused" 2 "'soon' is not a number" \
    tests/gpu/check.sh --emulated --budget soon
expect_error "gpu-check/a folder that is no bundle is refused" 2 "$G is not a bundle" \
    tests/gpu/check.sh "$G"
expect_error "gpu-bundle/bundle.sh wants one folder" 2 "usage: tests/gpu/bundle.sh DIR" \
    tests/gpu/bundle.sh
