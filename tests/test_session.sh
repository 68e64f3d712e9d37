# Sessions: saved as the chat happens, replayed, resumed exactly, verified; crashes and damaged or
# hostile files. Sourced by run.sh with KV, TAG, TMP, PYTHON.

S=$TMP/sess-${TAG%:}
rm -rf "$S"
mkdir -p "$S"
SM=$S/model
"$KV" make-tiny-model "$SM" --layers 2 --heads 2 --embd 32 --ctx 64 --seed 21 >/dev/null
MSGS=$'Hello there\nHow are you?\nTell me more\nAnd then what?\nThe end'
chat() { "$KV" chat --no-tui -m "$SM" -n 10 "$@"; }

printf '%s\n' "$MSGS" | head -3 | chat --seed 2 --session "$S/a.jsonl" >"$S/a.out"
check "${TAG}session/replay --no-tui shows the replies" grep -qF -- "$(head -1 "$S/a.out" | cut -c1-24)" \
    <("$KV" replay "$S/a.jsonl" --no-tui)
replies=$("$KV" replay "$S/a.jsonl" --no-tui | grep -c '] gpt-2: ')
same "${TAG}session/transcript has three turns" 3 "$replies"
check "${TAG}session/--verify reproduces the session" "$KV" replay "$S/a.jsonl" --verify
sed '1s/"kvchat_session": *2/"kvchat_session": 1/' "$S/a.jsonl" >"$S/old.jsonl"
"$KV" replay "$S/old.jsonl" --verify >/dev/null 2>"$S/old.err"
check "${TAG}session/--verify of a format-1 file says sampled turns may differ" grep -q "session format 1" "$S/old.err"

# resume = unbroken: greedy and seeded sampling, from the KV snapshot and by re-prefilling
for mode in "--temp 0" "--temp 1.0 --top-k 0 --top-p 1 --seed 7"; do
    printf '%s\n' "$MSGS" | chat $mode >"$S/unbroken"
    printf '%s\n' "$MSGS" | head -3 | chat $mode --session "$S/r.jsonl" --save-cache >"$S/p1"
    cp "$S/r.jsonl" "$S/r2.jsonl"
    printf '%s\n' "$MSGS" | tail -2 | "$KV" chat --no-tui --resume "$S/r.jsonl" >"$S/p2" 2>"$S/p2.err"
    printf '%s\n' "$MSGS" | tail -2 | "$KV" chat --no-tui --resume "$S/r2.jsonl" >"$S/p2b" 2>/dev/null
    same "${TAG}session/resume from the snapshot = unbroken ($mode)" "$(cat "$S/unbroken")" "$(cat "$S/p1" "$S/p2")"
    same "${TAG}session/resume by re-prefill = unbroken ($mode)" "$(cat "$S/unbroken")" "$(cat "$S/p1" "$S/p2b")"
    check "${TAG}session/the snapshot was used ($mode)" bash -c "! grep -q re-prefilling '$S/p2.err'"
    rm -f "$S"/r.jsonl* "$S"/r2.jsonl*
done

# another model: refused, --force re-prefills; a snapshot from another model is not loaded
"$KV" make-tiny-model "$S/other" --layers 2 --heads 2 --embd 32 --ctx 64 --seed 22 >/dev/null
printf 'hi\n' | chat --session "$S/m.jsonl" --save-cache >/dev/null
cp "$S/m.jsonl.kv" "$S/m.kv.saved" # the --force resume below continues without --save-cache: it removes m.jsonl.kv
expect_error "${TAG}session/resume with another model is refused" 1 "recorded with another model or tokenizer" \
    "$KV" chat --no-tui --resume "$S/m.jsonl" -m "$S/other"
check "${TAG}session/--force resumes with the other model" bash -c "printf 'hi\n' | '$KV' chat --no-tui --resume '$S/m.jsonl' -m '$S/other' --force >/dev/null 2>&1"
printf 'hi\n' | "$KV" chat --no-tui -m "$S/other" -n 4 --session "$S/o.jsonl" --save-cache >/dev/null
cp "$S/m.kv.saved" "$S/o.jsonl.kv"
printf 'again\n' | "$KV" chat --no-tui --resume "$S/o.jsonl" >/dev/null 2>"$S/o.err"
check "${TAG}session/a KV snapshot from another model is refused" grep -q "made by another model" "$S/o.err"

# --verify catches one altered token
"$PYTHON" - "$S/a.jsonl" "$S/altered.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
out, turn, done = [], 0, False
for l in lines:
    e = json.loads(l)
    if e.get("ev") == "turn_end":
        turn += 1
    if e.get("ev") == "token" and turn == 1 and not done:
        e["id"] = (e["id"] + 1) % 50000
        done = True
    out.append(json.dumps(e))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
"$KV" replay "$S/altered.jsonl" --verify >"$S/v.out" 2>&1
same "${TAG}session/--verify exits 1 on an altered token" 1 $?
check "${TAG}session/--verify names the turn and token" grep -q "turn 2 (conv 1): DIFFERS at token 1" "$S/v.out"

# kill -9 during a turn: every completed turn is readable, the file resumes. Two complete turns,
# then a third that would never end, killed mid-way.
"$KV" chat --no-tui -m "$SM" -n 8 --session "$S/k.jsonl" <<<"$(printf 'one\ntwo')" >/dev/null
mkfifo "$S/in2"
"$KV" chat --no-tui --resume "$S/k.jsonl" -n 100000 <"$S/in2" >/dev/null 2>&1 &
kpid=$!
exec 7>"$S/in2"
printf 'three, forever\n' >&7
for _ in $(seq 100); do [ "$(grep -c '"ev":"token"' "$S/k.jsonl")" -ge 40 ] && break; sleep 0.1; done
kill -9 $kpid 2>/dev/null
wait $kpid 2>/dev/null
exec 7>&-
check "${TAG}session/after kill -9 the file replays" "$KV" replay "$S/k.jsonl" --no-tui
same "${TAG}session/after kill -9 the completed turns are there" 2 \
    "$("$KV" replay "$S/k.jsonl" --no-tui 2>/dev/null | grep -c '] gpt-2: ')"
check "${TAG}session/after kill -9 the session resumes" bash -c "printf 'four\n' | '$KV' chat --no-tui --resume '$S/k.jsonl' -n 4 >/dev/null 2>&1"

expect_error "${TAG}session/missing file" 1 "nope.jsonl: No such file" "$KV" replay "$S/nope.jsonl" --no-tui
# a line cut by a crash: the complete turns replay, and it says the rest was cut
head -c -20 "$S/a.jsonl" >"$S/cut.jsonl"
"$KV" replay "$S/cut.jsonl" --no-tui >"$S/cut.out" 2>"$S/cut.err"
same "${TAG}session/cut last line replays" 0 $?
check "${TAG}session/cut last line is reported" grep -q "was cut after line" "$S/cut.err"
