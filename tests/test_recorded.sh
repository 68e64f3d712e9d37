# Recorded means reproducible: a resumed session continues with the settings it last had, options
# given with --resume are recorded, a turn cut by a crash is not paired with a later one, the cache
# pool's size is part of the record, and verify's last line names the turn that differed.
# Sourced by run.sh with KV, TAG, TMP, PYTHON.

R=$TMP/recorded-${TAG%:}
rm -rf "$R"
mkdir -p "$R"
RM=$R/model
T=${TAG}recorded
kc() { # chat --no-tui, its stderr also kept for the sanitizer check at the end
    "$KV" chat --no-tui "$@" 2>"$R/last.err"
    local rc=$?
    cat "$R/last.err" >&2
    cat "$R/last.err" >>"$R/stderr.log"
    return $rc
}
"$KV" make-tiny-model "$RM" --layers 2 --heads 2 --embd 32 --ctx 64 --seed 31 >/dev/null
ends() { # the tokens each turn_end of FILE says its reply kept, and the token events it streamed
    "$PYTHON" - "$1" <<'PY'
import json, sys
n = 0
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("ev") in ("user", "retry", "edit"):
        n = 0
    elif e.get("ev") == "token":
        n += 1
    elif e.get("ev") == "turn_end":
        print(e["tokens"], n)
PY
}

# turn_end.tokens with evictions inside the replies (it said 0)
printf 'hello there\nhow are you\nmore please\nand more\n' |
    kc -m "$RM" --ctx 48 -n 30 --template none --session "$R/ev.jsonl" >/dev/null 2>&1
check "$T/the replies slid the window" grep -q '"ev":"evict"' "$R/ev.jsonl"
same "$T/turn_end.tokens counts a reply that evicted" "30 30
30 30
30 30
30 30" "$(ends "$R/ev.jsonl")"

# a /set recorded after the last turn: the resumed run continues with it (the TUI writes this event)
printf 'one\ntwo\n' | kc -m "$RM" -n 10 --session "$R/set.jsonl" >/dev/null 2>&1
"$PYTHON" - "$R/set.jsonl" <<'PY'
import json, sys
h = json.loads(open(sys.argv[1]).readline())
st = dict(h["sampling"], temp=0.0, top_k=5, n_predict=23, ev="set", conv=0, t=9.0)
open(sys.argv[1], "a").write(json.dumps(st) + "\n")
PY
printf 'three\n' | kc --resume "$R/set.jsonl" --template none >/dev/null 2>&1
same "$T/--resume continues with the last /set (n 23)" "23 23" "$(ends "$R/set.jsonl" | tail -1)"
check "$T/a session resumed after a /set verifies" "$KV" replay "$R/set.jsonl" --verify

# options given with --resume: applied (the seed and temperature change the reply) and recorded
printf 'one\ntwo\n' | kc -m "$RM" -n 10 --session "$R/o.jsonl" >/dev/null 2>&1
cp "$R/o.jsonl" "$R/o2.jsonl"
printf 'three\n' | kc --resume "$R/o.jsonl" -n 8 --temp 1.5 --seed 5 >"$R/o.out" \
    2>"$R/o.err"
printf 'three\n' | kc --resume "$R/o2.jsonl" >"$R/o2.out" 2>/dev/null
same "$T/-n with --resume is applied" "8 8" "$(ends "$R/o.jsonl" | tail -1)"
check "$T/--temp and --seed with --resume are applied" \
    bash -c "! cmp -s '$R/o.out' '$R/o2.out'"
check "$T/options with --resume are named" \
    grep -q "continues with -n, --temp, --seed from the command line" "$R/o.err"
check "$T/options with --resume are recorded (verify passes)" "$KV" replay "$R/o.jsonl" --verify
# a window changed with --resume: verify re-runs the resumed turns with it
printf 'one\ntwo\n' | kc -m "$RM" -n 10 --ctx 40 --session "$R/w.jsonl" >/dev/null 2>&1
printf 'three\nfour\n' | kc --resume "$R/w.jsonl" --ctx 64 -n 12 >/dev/null 2>&1
"$KV" replay "$R/w.jsonl" --verify >"$R/w.out" 2>&1
same "$T/a session resumed with another --ctx verifies" 0 $?
check "$T/verify says the resumed run's settings" \
    grep -q "resumed with other settings (--ctx" "$R/w.out"

# a turn cut by kill -9 (its tokens on disk, its turn_end not), then a resume: verify calls it cut
printf 'one\ntwo\n' | kc -m "$RM" -n 10 --session "$R/cut.jsonl" >/dev/null 2>&1
"$PYTHON" - "$R/cut.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
toks = [e for e in lines if e.get("ev") == "token"][:6]
extra = [dict(ev="user", conv=1, t=5.0, text="a turn the crash cut")] + toks
open(sys.argv[1], "a").write("".join(json.dumps(e) + "\n" for e in extra))
PY
printf 'after the crash\n' | kc --resume "$R/cut.jsonl" >/dev/null 2>&1
"$KV" replay "$R/cut.jsonl" --verify >"$R/cut.out" 2>&1
same "$T/verify after a cut turn and a resume passes" 0 $?
check "$T/verify names the cut turn" grep -q "turn 3 (conv 1): cut (no turn_end" "$R/cut.out"
check "$T/the turn after the cut one is compared" \
    grep -q "turn 4 (conv 1): 10 tokens, same" "$R/cut.out"

# the pool's size is part of the record: a turn that failed on a full 8K pool verifies as failing
printf 'one two three four five six seven eight nine ten eleven twelve\n' |
    kc -m "$RM" -n 30 --cache-mem 8K --block-tokens 4 --session "$R/pool.jsonl" \
    >/dev/null 2>&1
check "$T/the 8K pool's turn failed" grep -q '"failed":true' "$R/pool.jsonl"
check "$T/a turn failed by a full pool verifies" "$KV" replay "$R/pool.jsonl" --verify
"$KV" replay "$R/pool.jsonl" --verify --cache-mem 1M >"$R/pool.out" 2>&1
same "$T/--cache-mem given to verify wins" 1 $?
check "$T/--cache-mem given to verify is named" \
    grep -q "verifying with --cache-mem from the command line" "$R/pool.out"
check "$T/verify's last line names the differing turn" bash -c \
    "tail -1 '$R/pool.out' | grep -q 'turn 1 (conv 1) recorded a failure and got a reply'"
check "$T/no sanitizer report from any run above" \
    bash -c "! grep -E 'AddressSanitizer|runtime error|LeakSanitizer' '$R/stderr.log'"
