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
# the recorded actions are redone through the chat's command table: one it cannot redo stops it
sed -E '0,/"ev":"new","conv":1,/ s//"ev":"new","conv":3,/' "$S/a.jsonl" >"$S/renum.jsonl"
expect_error "${TAG}session/--verify: a conversation out of the recorded order" 1 \
    "renum.jsonl: conversation 3 cannot be recreated in the recorded order" \
    "$KV" replay "$S/renum.jsonl" --verify
# a model named by a relative path is recorded absolute: --verify works from any directory
KVABS=$(realpath "$KV")
(cd "$S" && printf 'hi\n' | "$KVABS" chat --no-tui -m model -n 4 --seed 3 --session rel.jsonl >/dev/null 2>&1)
check "${TAG}session/a relative -m verifies from another directory" bash -c "cd / && '$KVABS' replay '$S/rel.jsonl' --verify"
check "${TAG}session/a line-mode session records the model" grep -q '"ev":"model"' "$S/a.jsonl"
# evictions prepared while the user types (pauses between messages): recorded, verified exactly, and
# the replies those of the same chat without preparation
PACED=("Hello there" "How are you?" "Tell me more" "And then what?" "The end" "One more" "Another")
paced() { for m in "${PACED[@]}"; do echo "$m"; sleep 0.3; done; }
# paced_by FILE: each message once the reply before it has ended and, from the second on, the next
# eviction has been prepared (FILE's events): a loaded machine takes longer, never too long
paced_by() {
    local k=0 f=$1 # (await's conditions see this function's locals, not its arguments)
    for m in "${PACED[@]}"; do
        echo "$m"
        k=$((k + 1))
        await "reply $k" '[ "$(cat "$f" 2>/dev/null | grep -c "\"ev\":\"turn_end\"")" -ge $k ]'
        await "prepared $k" '[ "$(grep -c "\"ev\":\"prepare\"" "$f")" -ge $((k - 1)) ]'
    done
}
rm -f "$S/prep.jsonl"
paced_by "$S/prep.jsonl" | chat --seed 3 --ctx 48 --evict-min 8 --session "$S/prep.jsonl" \
    >"$S/prep.out"
check "${TAG}session/evictions prepared between messages are recorded" grep -q '"prepared":true' "$S/prep.jsonl"
check "${TAG}session/a session with prepared evictions verifies" "$KV" replay "$S/prep.jsonl" --verify
paced | chat --seed 3 --ctx 48 --evict-min 8 --prepare-evict off --no-save >"$S/noprep.out"
check "${TAG}session/the same chat without preparation gives the same replies" cmp -s "$S/prep.out" "$S/noprep.out"
# attention events are recorded (where the replies read), and the session replays and verifies
# as one without them
paced | chat --seed 3 --ctx 48 --evict-min 8 --attention 4 --session "$S/att.jsonl" >"$S/att.out"
check "${TAG}session/attention events are recorded" grep -q '"ev": *"attention"' "$S/att.jsonl"
check "${TAG}session/a session with attention events verifies" "$KV" replay "$S/att.jsonl" --verify
check "${TAG}session/... and replays (--no-tui)" "$KV" replay "$S/att.jsonl" --no-tui
check "${TAG}session/the same chat without them gives the same replies" \
    cmp -s "$S/prep.out" "$S/att.out"
# the events name turns by their number in the conversation, which a resume carries on
paced | head -4 | chat --seed 3 --ctx 48 --evict-min 8 --attention 4 --session "$S/att2.jsonl" \
    >/dev/null
paced | tail -3 | chat --resume "$S/att2.jsonl" --attention 4 >/dev/null
att_turns() { "$PYTHON" -c 'import json, sys
print([e["turns"] for e in map(json.loads, open(sys.argv[1])) if e.get("ev") == "attention"])' "$1"; }
same "${TAG}session/attention events number turns across evictions and a resume" \
    "$(att_turns "$S/att.jsonl")" "$(att_turns "$S/att2.jsonl")"
check "${TAG}session/... up to the last reply, turn 15 (after the preamble, 7 messages)" \
    grep -q '"turns": *\[0,[0-9, ]*15\]' "$S/att.jsonl"
# --evict least-read is recorded with each turn's reading, verifies, and a resume goes on with the
# recorded reading (the replies those of the same chat in one run)
paced | chat --seed 3 --ctx 48 --evict-min 8 --evict least-read --session "$S/lr.jsonl" >"$S/lr.out"
check "${TAG}session/--evict least-read is recorded" grep -q '"evict": *"least-read"' "$S/lr.jsonl"
check "${TAG}session/... with each turn's reading" grep -q '"reads": *\[' "$S/lr.jsonl"
check "${TAG}session/a least-read chat verifies" "$KV" replay "$S/lr.jsonl" --verify
paced | head -4 | chat --seed 3 --ctx 48 --evict-min 8 --evict least-read \
    --session "$S/lr2.jsonl" >"$S/lr2.out"
paced | tail -3 | chat --resume "$S/lr2.jsonl" >>"$S/lr2.out"
check "${TAG}session/a resumed least-read chat goes on as one run" cmp -s "$S/lr.out" "$S/lr2.out"
# each rule of when to evict is recorded and verifies; a session from before the rule was
# recorded evicting when full, and verifies so; a rule it cannot know is refused
for rule in turn full; do
    paced | chat --seed 3 --ctx 48 --evict-min 8 -n 12 --evict-at $rule --session "$S/at-$rule.jsonl" >/dev/null
    check "${TAG}session/--evict-at $rule is recorded" grep -q "\"evict_at\": *\"$rule\"" "$S/at-$rule.jsonl"
    check "${TAG}session/a chat evicting at $rule verifies" "$KV" replay "$S/at-$rule.jsonl" --verify
done
header_set() { # FILE KEY VALUE OUT: the session FILE with its header's chat.KEY set (None: removed)
    "$PYTHON" - "$@" <<'PY'
import json, sys
f, key, value, out = sys.argv[1:]
lines = open(f).read().split("\n")
h = json.loads(lines[0])
h["chat"].pop(key) if value == "None" else h["chat"].__setitem__(key, value)
lines[0] = json.dumps(h)
open(out, "w").write("\n".join(lines))
PY
}
# a reply past the room its turn could make: its eviction is prepared as it streams, and verifies
paced | chat --seed 3 --ctx 48 --evict-min 8 -n 40 --evict-at turn --session "$S/at-long.jsonl" >/dev/null
check "${TAG}session/an eviction prepared inside a reply is recorded" "$PYTHON" -c '
import json, sys
replying, found = False, 0
for line in open(sys.argv[1]).read().splitlines()[1:]:
    e = json.loads(line)
    replying = True if e["ev"] == "token" else False if e["ev"] == "turn_end" else replying
    found += replying and e["ev"] == "evict" and e.get("prepared", False)
sys.exit(0 if found else 1)' "$S/at-long.jsonl"
check "${TAG}session/a chat with evictions prepared inside replies verifies" "$KV" replay "$S/at-long.jsonl" --verify
header_set "$S/at-full.jsonl" evict_at None "$S/at-none.jsonl"
check "${TAG}session/a session without evict_at verifies as full" bash -c \
    "! grep -q evict_at '$S/at-none.jsonl' && '$KV' replay '$S/at-none.jsonl' --verify"
header_set "$S/at-turn.jsonl" evict_at soon "$S/at-bad.jsonl"
expect_error "${TAG}session/an unknown evict_at is refused" 1 "evict_at 'soon' is neither turn nor full" \
    "$KV" replay "$S/at-bad.jsonl" --verify
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

# a q4 cache (a model of its own: heads of 32 fill its blocks): a chat that evicts and forks
# verifies on replay; resumed from its snapshot it goes on as unbroken; the snapshot names its type
Q4M=$S/q4model
"$KV" make-tiny-model "$Q4M" --layers 2 --heads 2 --embd 64 --ctx 64 --seed 21 >/dev/null
q4chat() { "$KV" chat --no-tui -m "$Q4M" -n 10 --cache-dtype q4 --ctx 40 --temp 0 "$@"; }
printf '%s\n/fork\nIn the fork\n' "$MSGS" | q4chat --session "$S/q4f.jsonl" >/dev/null 2>&1
check "${TAG}session/a q4-cache chat with evictions and a fork verifies" \
    "$KV" replay "$S/q4f.jsonl" --verify
check "${TAG}session/... it evicted" grep -q '"ev":"evict"' "$S/q4f.jsonl"
printf '%s\n' "$MSGS" | q4chat >"$S/q4.unbroken"
printf '%s\n' "$MSGS" | head -3 | q4chat --session "$S/q4.jsonl" --save-cache >"$S/q4.p1"
cp "$S/q4.jsonl.kv" "$S/q4.kv.saved" # the resume below goes on without --save-cache: it removes it
printf '%s\n' "$MSGS" | tail -2 | "$KV" chat --no-tui --resume "$S/q4.jsonl" >"$S/q4.p2" 2>"$S/q4.err"
same "${TAG}session/q4 cache: resume from the snapshot = unbroken" "$(cat "$S/q4.unbroken")" \
    "$(cat "$S/q4.p1" "$S/q4.p2")"
check "${TAG}session/q4 cache: the snapshot was used" bash -c "! grep -q re-prefilling '$S/q4.err'"
printf 'hi\n' | q4chat --cache-dtype int8 --session "$S/i8.jsonl" --save-cache >/dev/null 2>&1
cp "$S/q4.kv.saved" "$S/i8.jsonl.kv"
printf 'again\n' | "$KV" chat --no-tui --resume "$S/i8.jsonl" >/dev/null 2>"$S/i8.err"
check "${TAG}session/a q4 snapshot is refused by an int8 cache, by name" \
    grep -q "holds a q4 cache, this run uses int8" "$S/i8.err"

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
check "${TAG}session/--verify's last line names the turn" \
    bash -c "tail -1 '$S/v.out' | grep -q 'altered.jsonl does not reproduce: turn 2 (conv 1) differs at token 1'"

# a /set recorded while a reply ran takes effect when it ends: verify applies it there, inside the
# turn's events or after them alike (n_predict 3 from turn 2 on: turn 2 no longer reproduces)
for where in inside after; do
    "$PYTHON" - "$S/a.jsonl" "$S/set-$where.jsonl" "$where" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
st = dict(lines[0]["sampling"], n_predict=3)
st.update(ev="set", conv=1, t=0)
first_end = next(i for i, e in enumerate(lines) if e.get("ev") == "turn_end")
at = first_end if sys.argv[3] == "inside" else first_end + 1
lines.insert(at, st)
open(sys.argv[2], "w").write("".join(json.dumps(e) + "\n" for e in lines))
PY
    "$KV" replay "$S/set-$where.jsonl" --verify >"$S/set-$where.out" 2>&1
    check "${TAG}session/--verify applies a set recorded $where a turn" grep -q "turn 2 (conv 1): DIFFERS" "$S/set-$where.out"
done

# kill -9 during a turn: every completed turn is readable, the file resumes. Two complete turns,
# then a third that would never end, killed mid-way.
"$KV" chat --no-tui -m "$SM" -n 8 --session "$S/k.jsonl" <<<"$(printf 'one\ntwo')" >/dev/null
mkfifo "$S/in2"
"$KV" chat --no-tui --resume "$S/k.jsonl" -n 100000 <"$S/in2" >/dev/null 2>&1 &
kpid=$!
exec 7>"$S/in2"
printf 'three, forever\n' >&7
await "40 tokens of the third turn" '[ "$(grep -c "\"ev\":\"token\"" "$S/k.jsonl")" -ge 40 ]'
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

# --- nothing lost: interrupted writes, stale snapshots, files that exist, many conversations ---

# a write cut by a crash, then resume: the cut line goes to FILE.damaged, the file stays readable
"$KV" chat --no-tui -m "$SM" -n 6 --session "$S/c.jsonl" <<<"one" >/dev/null
grep '"ev":"token"' "$S/c.jsonl" | head -1 | head -c 25 >>"$S/c.jsonl" # a token line cut mid-write
printf 'two\n' | "$KV" chat --no-tui --resume "$S/c.jsonl" -n 6 >/dev/null 2>"$S/c.err"
check "${TAG}session/resume after a cut write says where the cut bytes went" grep -q "kept in $S/c.jsonl.damaged" "$S/c.err"
same "${TAG}session/the cut bytes are kept" "$(grep '"ev":"token"' "$S/c.jsonl" | head -1 | head -c 25)" "$(cat "$S/c.jsonl.damaged")"
check "${TAG}session/after a cut write and a resume the file replays" "$KV" replay "$S/c.jsonl" --no-tui
same "${TAG}session/after a cut write and a resume both turns are there" 2 \
    "$("$KV" replay "$S/c.jsonl" --no-tui 2>/dev/null | grep -c '] gpt-2: ')"
check "${TAG}session/after a cut write and a resume --verify passes" "$KV" replay "$S/c.jsonl" --verify
# the same after the kill -9 above: resumed once already, then replayed whole
check "${TAG}session/after kill -9 and resume the file replays" "$KV" replay "$S/k.jsonl" --no-tui
same "${TAG}session/after kill -9 and resume the new turn is there" 3 \
    "$("$KV" replay "$S/k.jsonl" --no-tui 2>/dev/null | grep -c '] gpt-2: ')"

# a stale snapshot (the session went on without --save-cache, or a crash came between the turn's fsync
# and the snapshot's rename) is never loaded, even when its window has the current one's length (here
# turns 6 to 8 all leave 27 tokens): resuming with it must be resuming with no snapshot at all
G="--temp 0 --ctx 32 --evict-min 1 --evict shift -n 4"
SMSGS=$'Hello there\nHow are you?\nTell me more\nAnd then what?\nThe end\nok\nyes\nno'
printf '%s\n' "$SMSGS" | head -6 | chat $G --session "$S/st.jsonl" --save-cache >/dev/null
cp "$S/st.jsonl.kv" "$S/st.kv.old"
printf 'yes\n' | "$KV" chat --no-tui --resume "$S/st.jsonl" >/dev/null 2>&1
check "${TAG}session/going on without --save-cache removes the snapshot" test ! -e "$S/st.jsonl.kv"
cp "$S/st.jsonl" "$S/st-none.jsonl"
cp "$S/st.kv.old" "$S/st.jsonl.kv" # as a crash before the rename would leave it
printf 'no\n' | "$KV" chat --no-tui --resume "$S/st.jsonl" --save-cache >"$S/st.3" 2>"$S/st.err"
printf 'no\n' | "$KV" chat --no-tui --resume "$S/st-none.jsonl" >"$S/st.none" 2>/dev/null
same "${TAG}session/a stale snapshot replies as no snapshot does" "$(cat "$S/st.none")" "$(cat "$S/st.3")"
check "${TAG}session/a stale snapshot is named stale" grep -q "another point of the session (a stale snapshot)" "$S/st.err"
# a FIFO where the snapshot was: no hang; a large sparse file with a valid header: refused by its size
rm -f "$S/st.jsonl.kv"
mkfifo "$S/st.jsonl.kv"
: >"$S/st.jsonl.kv.part" # a snapshot write killed midway
printf 'fifo\n' | timeout 600 "$KV" chat --no-tui --resume "$S/st.jsonl" -n 2 >/dev/null 2>"$S/fifo.err"
same "${TAG}session/a FIFO in place of the snapshot does not hang resume" 0 $?
check "${TAG}session/a FIFO in place of the snapshot is named" grep -q "not a regular file" "$S/fifo.err"
check "${TAG}session/a killed snapshot write's .part is removed" test ! -e "$S/st.jsonl.kv.part"
rm -f "$S/st.jsonl.kv"
head -c 56 "$S/st.kv.old" >"$S/st.jsonl.kv"
truncate -s 3G "$S/st.jsonl.kv"
printf 'sparse\n' | timeout 600 "$KV" chat --no-tui --resume "$S/st.jsonl" -n 2 >/dev/null 2>"$S/sparse.err"
check "${TAG}session/a 3 GB snapshot is refused by its size before reading" grep -q "needing [0-9]* bytes" "$S/sparse.err"
rm -f "$S/st.jsonl.kv"

# --session FILE twice: the second run continues the session, never truncates it
chat $G --session "$S/twice.jsonl" <<<"first run" >/dev/null
chat $G --session "$S/twice.jsonl" <<<"second run" >/dev/null 2>"$S/twice.err"
same "${TAG}session/--session twice keeps both runs" 2 "$("$KV" replay "$S/twice.jsonl" --no-tui | grep -c '] gpt-2: ')"
check "${TAG}session/--session twice says it continues" grep -q "continuing it" "$S/twice.err"
check "${TAG}session/--session twice verifies" "$KV" replay "$S/twice.jsonl" --verify
printf 'my notes\n' >"$S/notes.txt"
expect_error "${TAG}session/--session onto a file that is not a session is refused" 1 \
    "--session $S/notes.txt already exists .*--force to overwrite" bash -c "printf 'hi\n' | '$KV' chat --no-tui -m '$SM' --session '$S/notes.txt'"
same "${TAG}session/the refused file is untouched" "my notes" "$(cat "$S/notes.txt")"
printf 'hi\n' | chat --session "$S/notes.txt" --force >/dev/null 2>&1
check "${TAG}session/--force overwrites it with a session" "$KV" replay "$S/notes.txt" --no-tui
head -3 "$S/twice.jsonl" >"$S/noturn.jsonl"
expect_error "${TAG}session/--session onto a session with no completed turn is refused" 1 \
    "already exists \(a session with no completed turn\)" bash -c "printf 'hi\n' | '$KV' chat --no-tui -m '$SM' --session '$S/noturn.jsonl'"
# two writers of one session: the second is refused
mkfifo "$S/in3"
"$KV" chat --no-tui --resume "$S/twice.jsonl" <"$S/in3" >/dev/null 2>&1 &
lpid=$!
exec 8>"$S/in3"
# the lock seen in /proc/locks: taking it to find out (flock -n) could, for that moment, make the
# chat's own attempt fail, and the second writer then find the file free
await "the resumed chat's lock on its session" 'grep -q ":$(stat -c %i "$S/twice.jsonl") " /proc/locks'
expect_error "${TAG}session/a second writer of one session is refused" 1 "another kvchat is writing to it" \
    bash -c "printf 'hi\n' | '$KV' chat --no-tui --resume '$S/twice.jsonl'"
exec 8>&-
wait $lpid

# conversation ids past 1023 are restored, and the next message goes to the last one
"$PYTHON" - "$S/a.jsonl" "$S/many.jsonl" "$S/only5000.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
header, end = lines[0], next(json.loads(l) for l in lines if '"turn_end"' in l)
def conv(i):
    e = dict(end); e["conv"] = i; return json.dumps(e)
open(sys.argv[2], "w").write("\n".join([header] + [conv(i) for i in range(1, 1101)]) + "\n")
open(sys.argv[3], "w").write("\n".join([header, conv(5000)]) + "\n")
PY
printf 'to the last\n' | "$KV" chat --no-tui --resume "$S/many.jsonl" -n 2 >/dev/null 2>"$S/many.err"
same "${TAG}session/1,100 conversations are all restored (re-prefilled)" 1100 "$(grep -o 're-prefilling conversation [0-9]*' "$S/many.err" | sort -u | wc -l)"
same "${TAG}session/the next message goes to conversation 1100" 1100 \
    "$(tail -1 "$S/many.jsonl" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["conv"])')"
printf 'hello 5000\n' | "$KV" chat --no-tui --resume "$S/only5000.jsonl" -n 2 >/dev/null 2>&1
same "${TAG}session/a session holding only conversation 5000 resumes it" 5000 \
    "$(tail -1 "$S/only5000.jsonl" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["conv"])')"

# every setting's extremes: what kvchat writes, its reader accepts (the reader bounds what it trusts)
for cfg in "--cache-layout contiguous --grow-factor 1.5 --ctx 40" "--block-tokens 7 --ctx 40 --evict-min 1" \
    "--repeat-penalty 0.01 --top-p 0.001 --temp 100 --top-k 1" "--evict shift --evict-min 1 --ctx 24 --cache-dtype int8" \
    "--template dialogpt --ctx 30 -n 40 --keep 0" "--template none --ctx 16 -n 30 --seed 18446744073709551615"; do
    rm -f "$S/cfg.jsonl"
    printf '%s\n' "$MSGS" | chat $cfg --session "$S/cfg.jsonl" >/dev/null 2>&1
    check "${TAG}session/a session written with $cfg replays" "$KV" replay "$S/cfg.jsonl" --no-tui
    check "${TAG}session/a session written with $cfg resumes" bash -c "printf 'more\n' | '$KV' chat --no-tui --resume '$S/cfg.jsonl' -n 2"
done

# teacher forcing through a session (replay --verify --dump-logits): two conversations fed recorded ids,
# evicting in a window of 128; in a small pool they also go to host memory and come back. The logits of
# every step must not depend on the layout, the pool or the offloads.
"$KV" make-tiny-model "$S/m128" --layers 2 --heads 2 --embd 32 --ctx 128 --seed 3 >/dev/null
printf 'hi\n' | "$KV" chat --no-tui -m "$S/m128" -n 2 --session "$S/m128.jsonl" >/dev/null
"$PYTHON" tests/forced_session.py "$S/m128.jsonl" "$S/forced.jsonl"
"$KV" replay "$S/forced.jsonl" --verify --dump-logits "$S/forced-a.bin" --cache-mem 96K >/dev/null
"$KV" replay "$S/forced.jsonl" --verify --dump-logits "$S/forced-b.bin" --cache-layout contiguous >/dev/null
check "${TAG}session/forced replay: a row per step, the same with offloads as without" "$PYTHON" -c "
import numpy as n
a = n.fromfile('$S/forced-a.bin', '<f4').reshape(-1, 50257); b = n.fromfile('$S/forced-b.bin', '<f4').reshape(-1, 50257)
assert a.shape == (6 * 48, 50257) and b.shape == a.shape, (a.shape, b.shape)
e = max(n.linalg.norm(x - y) / n.linalg.norm(y) for x, y in zip(a, b))
assert e < 1e-5 and len({r.tobytes() for r in a}) == len(a), e"
expect_error "${TAG}session/--dump-logits without --verify" 2 "--dump-logits goes with --verify" \
    "$KV" replay "$S/forced.jsonl" --dump-logits "$S/x.bin"

# the saved sessions: listed newest first, replay with no file lists them, --resume last continues the newest
D=$S/data/kvchat/sessions
mkdir -p "$D"
cp "$S/a.jsonl" "$D/2026-01-01-000000.jsonl"
cp "$S/rel.jsonl" "$D/2026-01-02-000000.jsonl"
touch -d '2026-01-01 00:00' "$D/2026-01-01-000000.jsonl"
touch -d '2026-01-02 00:00' "$D/2026-01-02-000000.jsonl"
list=$(XDG_DATA_HOME=$S/data "$KV" sessions)
same "${TAG}session/sessions lists them newest first, with turns and model" \
    "1 model 2026-01-02-000000.jsonl|3 model 2026-01-01-000000.jsonl" \
    "$(echo "$list" | tail -n +2 | awk '{print $2, $3, $NF}' | sed 's|[^ ]*/||' | paste -sd'|')"
same "${TAG}session/replay with no file lists them" "$list" "$(XDG_DATA_HOME=$S/data "$KV" replay)"
same "${TAG}session/sessions -n 1 says how many more" "(1 more: kvchat sessions -n 2)" \
    "$(XDG_DATA_HOME=$S/data "$KV" sessions -n 1 | tail -1)"
printf 'once more\n' | XDG_DATA_HOME=$S/data "$KV" chat --no-tui --resume last -n 3 >/dev/null 2>&1
same "${TAG}session/--resume last continues the newest" "2 3" \
    "$(grep -c '"ev":"turn_end"' "$D/2026-01-02-000000.jsonl") $(grep -c '"ev":"turn_end"' "$D/2026-01-01-000000.jsonl")"
same "${TAG}session/sessions in an empty place says so" "no saved sessions in $S/none/kvchat/sessions" \
    "$(XDG_DATA_HOME=$S/none "$KV" sessions)"
expect_error "${TAG}session/--resume last with none saved" 2 "--resume last: no saved session in .*/none/kvchat/sessions" \
    env XDG_DATA_HOME="$S/none" "$KV" chat --no-tui --resume last
expect_error "${TAG}session/sessions bad flag" 2 "unknown option '--frob'" "$KV" sessions --frob
expect_error "${TAG}session/replay --verify needs a file" 2 "which session file\? \(kvchat sessions lists them\)" "$KV" replay --verify

# Ctrl-C mid-reply with sampling on, then another message: the stopped reply may have drawn once
# more than the same reply ending at its length, and --verify goes on from the recorded sampler state
"$KV" make-tiny-model "$S/slow" --layers 4 --heads 4 --embd 128 --ctx 64 --seed 23 >/dev/null
rm -f "$S/int.jsonl" "$S/int.fifo"
mkfifo "$S/int.fifo"
"$KV" chat --no-tui -m "$S/slow" -n 4000 --seed 9 --session "$S/int.jsonl" <"$S/int.fifo" >/dev/null 2>&1 &
int_pid=$!
exec 7>"$S/int.fifo"
echo "tell me everything" >&7
await "100 tokens of the reply" '[ "$(cat "$S/int.jsonl" 2>/dev/null | grep -c "\"ev\":\"token\"")" -ge 100 ]'
kill -INT "$int_pid"
await "the stopped reply's turn_end" 'grep -q "\"cancelled\":true" "$S/int.jsonl" 2>/dev/null'
echo "and then" >&7
exec 7>&-
wait "$int_pid"
same "${TAG}session/a reply stopped by Ctrl-C, then another: both recorded" "1 2" \
    "$(grep -c '"cancelled":true' "$S/int.jsonl") $(grep -c '"ev":"turn_end"' "$S/int.jsonl")"
check "${TAG}session/--verify goes on after a stopped reply from the recorded sampler state" "$KV" replay "$S/int.jsonl" --verify

# a standard descriptor closed at start is held on /dev/null: the session and a logits dump are
# never the file that takes its number (the replies, or the progress lines, written into them)
printf 'hi\nagain\n' | chat --seed 2 --session "$S/closed-out.jsonl" >&-
check "${TAG}session/with stdout closed the session holds no reply text and verifies" \
    "$KV" replay "$S/closed-out.jsonl" --verify
printf 'hi\n' | chat --seed 2 --session "$S/closed-err.jsonl" >/dev/null 2>&1
printf 'again\n' | chat --seed 2 --session "$S/closed-err.jsonl" 2>&- >/dev/null # re-prefills
check "${TAG}session/with stderr closed, resumed: no progress line in the session, it verifies" \
    "$KV" replay "$S/closed-err.jsonl" --verify
"$KV" generate -m "$SM" --prompt-ids 464,3290 -n 2 --temp 0 -q --dump-logits "$S/closed.bin" >&-
same "${TAG}session/with stdout closed a logits dump is whole rows of logits only" 0 \
    "$(($(stat -c %s "$S/closed.bin") % (50257 * 4)))$([ -s "$S/closed.bin" ] || echo " (empty)")"

# kvchat sessions reads a line in pieces: a 200 MB first line costs it no more memory than a
# small one (the peaks compared: the CUDA build's libraries alone take more than the line's pieces)
mkdir -p "$S/big/kvchat/sessions" "$S/small/kvchat/sessions"
"$PYTHON" -c "
import sys
with open(sys.argv[1], 'w') as f:
    f.write('{\"kvchat_session\":2,\"pad\":\"' + 'a' * (200 << 20) + '\"}\n')" "$S/big/kvchat/sessions/big.jsonl"
cp "$S/a.jsonl" "$S/small/kvchat/sessions/small.jsonl"
peak_mib() { XDG_DATA_HOME=$1 "$PYTHON" -c "
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], 'sessions'], capture_output=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10)" "$KV"; }
read -r rc_small small <<<"$(peak_mib "$S/small")"
read -r rc_big big <<<"$(peak_mib "$S/big")"
same "${TAG}session/kvchat sessions lists a session with a 200 MB first line in 32 MiB more" \
    "0 0 yes" "$rc_small $rc_big $([ $((big - small)) -lt 32 ] && echo yes || echo "no: $small -> $big MiB")"
rm -rf "$S/big" "$S/small"
# turn numbers are bounded where the next one still fits: a forged 2^31-1 is refused by the reader,
# and a conversation at the bound says so instead of overflowing
printf 'hi\n' | "$KV" chat --no-tui -m "$SM" -n 2 --session "$S/nums.jsonl" >/dev/null 2>&1
for n in 2147483647 1073741824; do
    "$PYTHON" - "$S/nums.jsonl" "$S/nums-$n.jsonl" "$n" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for ev in lines:
    if ev.get("ev") == "turn_end":
        ev["numbers"][-1] = int(sys.argv[3])
open(sys.argv[2], "w").write("".join(json.dumps(ev) + "\n" for ev in lines))
PY
done
expect_error "${TAG}session/a turn number past 2^30 is refused" 1 "numbers" \
    "$KV" replay "$S/nums-2147483647.jsonl" --no-tui
printf 'more\n' | "$KV" chat --no-tui --resume "$S/nums-1073741824.jsonl" -n 2 >/dev/null \
    2>"$S/nums.err"
same "${TAG}session/a conversation at the last turn number says so (exit 1)" "1|1" "$?|$(grep -c \
    'this conversation has had 1073741824 turns, the most a session records: /new starts another' \
    "$S/nums.err")"

# /save of any conversation writes a session of its own: a fork's file carries what it shares with
# its parent, and it replays, verifies and resumes alone; --resume brings back a fork that has no
# turn of its own (issue 46, items 2-3)
rm -f "$S"/sv-*.jsonl
printf 'hi\n/fork\nmore\n/save %s\n/new\nother\n/save %s\n/conv 1\n/fork\n/save %s\n' \
    "$S/sv-fork.jsonl" "$S/sv-new.jsonl" "$S/sv-bare.jsonl" |
    "$KV" chat --no-tui -m "$SM" -n 3 --temp 0.9 --seed 4 --no-save >/dev/null 2>&1
for f in fork new bare; do
    check "${TAG}session//save of a ${f} conversation verifies alone" "$KV" replay "$S/sv-$f.jsonl" --verify
done
same "${TAG}session/a fork's file holds its parent's turn, then its own" "1 2" \
    "$(grep -o '"ev":"turn_end","conv":[0-9]*' "$S/sv-fork.jsonl" | grep -o '[0-9]*$' | paste -sd' ')"
printf '/show\nnext\n' | "$KV" chat --no-tui --resume "$S/sv-bare.jsonl" -n 3 >/dev/null 2>"$S/bare.err"
same "${TAG}session/--resume keeps a fork with no turn of its own, and goes on in it" "2" \
    "$(grep -o '"ev":"turn_end","conv":[0-9]*' "$S/sv-bare.jsonl" | tail -1 | grep -o '[0-9]*$')"
check "${TAG}session/... and the session verifies" "$KV" replay "$S/sv-bare.jsonl" --verify
# --resume A --session B: B carries A's history (item 4); /save after a resume with other settings
# reads the earlier turns by their own settings (item 5)
printf 'Hello there friend\nHow are you today\n' |
    "$KV" chat --no-tui -m "$SM" -n 8 --ctx 48 --seed 2 --session "$S/ra.jsonl" >/dev/null 2>&1
cp "$S/ra.jsonl" "$S/ra.before"
rm -f "$S/rb.jsonl" "$S/rs.jsonl"
printf 'again\n/save %s\n' "$S/rs.jsonl" | "$KV" chat --no-tui --resume "$S/ra.jsonl" \
    --session "$S/rb.jsonl" -n 4 --cache-layout contiguous --temp 0.7 >/dev/null 2>&1
check "${TAG}session/--resume A --session B: A is untouched" cmp "$S/ra.jsonl" "$S/ra.before"
same "${TAG}session/... B begins as A" same \
    "$(cmp -s <(head -c "$(stat -c %s "$S/ra.jsonl")" "$S/rb.jsonl") "$S/ra.jsonl" && echo same)"
check "${TAG}session/... and B verifies alone" "$KV" replay "$S/rb.jsonl" --verify
check "${TAG}session//save after a resume with other settings verifies" \
    "$KV" replay "$S/rs.jsonl" --verify
# a resume that fails leaves the file as it was: the next resume and verify work (item 6)
printf 'x\n' | "$KV" chat --no-tui --resume "$S/ra.jsonl" --cache-mem 4K >/dev/null 2>"$S/ra.err"
same "${TAG}session/a resume that fails (a pool too small): exit 1" "1|1" \
    "$?|$(grep -c 'the KV pool .* is full' "$S/ra.err")"
check "${TAG}session/... leaves the session as it was" cmp "$S/ra.jsonl" "$S/ra.before"
# --verify of a reply Ctrl-C stopped in a turn that began with an eviction: the re-run makes the
# recorded room (the recorded n), and stops where the user did; a forged window is caught (item 7)
printf 'Hello there friend\nHow are you today\nTell me about it\n' |
    "$KV" chat --no-tui -m "$SM" -n 24 --ctx 64 --seed 1 --session "$S/c7.jsonl" >/dev/null 2>&1
for forge in stopped window; do
    "$PYTHON" - "$S/c7.jsonl" "$S/c7-$forge.jsonl" "$forge" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
users = [i for i, e in enumerate(lines) if e.get("ev") == "user"]
end = max(i for i, e in enumerate(lines) if e.get("ev") == "turn_end")
k, out, seen = 5, [], 0
for i, e in enumerate(lines):
    if users[-1] < i < end and e.get("ev") == "token":
        seen += 1
        if seen > k:
            continue
    if i == end:  # Ctrl-C after k tokens: the window ends with them (unless the window is forged)
        cut = e["tokens"] - k
        e.update(cancelled=True, tokens=k)
        if sys.argv[3] == "stopped":
            e["window"] = e["window"][:len(e["window"]) - cut]
            e["turns"][-1][1] -= cut
    out.append(e)
open(sys.argv[2], "w").write("".join(json.dumps(e) + "\n" for e in out))
PY
done
check "${TAG}session/the turn began with an eviction" grep -q '"ev":"evict"' "$S/c7.jsonl"
check "${TAG}session/--verify of a Ctrl-C stop in a turn that began with an eviction" \
    "$KV" replay "$S/c7-stopped.jsonl" --verify
expect_error "${TAG}session/--verify compares the window a turn leaves, not only its tokens" 1 \
    "c7-window.jsonl does not reproduce: turn 3 \(conv 1\) leaves another window" \
    "$KV" replay "$S/c7-window.jsonl" --verify
