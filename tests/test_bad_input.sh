# Bad flags, files and prompts: one-line errors naming the thing, exit 1 (runtime) or 2 (usage), no
# crash and (under the sanitizer build) no leak. Sourced by run.sh with KV, TAG, TMP, PYTHON.

B=$TMP/bad-${TAG%:}
rm -rf "$B"
mkdir -p "$B"
"$KV" make-tiny-model "$B/good" --layers 1 --heads 2 --embd 16 --ctx 32 >/dev/null
damage() { # damage NAME KIND: copy the good model to $B/NAME and break it
    rm -rf "$B/$1"
    cp -r "$B/good" "$B/$1"
    "$PYTHON" tests/damage_checkpoint.py "$B/$1" "$2"
}

# usage errors: exit 2
expect_error "${TAG}bad/unknown command" 2 "unknown command 'frobnicate'" "$KV" frobnicate
expect_error "${TAG}bad/unknown flag" 2 "unknown option '--frob'" "$KV" generate -m "$B/good" --frob
expect_error "${TAG}bad/--temp abc" 2 "--temp: expected a number" "$KV" generate -m "$B/good" --temp abc
expect_error "${TAG}bad/--top-p 2" 2 "--top-p: expected a number from 0 to 1" "$KV" generate -m "$B/good" --top-p 2
expect_error "${TAG}bad/-n -1" 2 "--max-tokens: expected an integer" "$KV" generate -m "$B/good" -n -1
expect_error "${TAG}bad/--dtype q5" 2 "--dtype: expected" "$KV" generate -m "$B/good" --dtype q5
expect_error "${TAG}bad/missing value" 2 "--seed needs a value" "$KV" generate -m "$B/good" --seed
expect_error "${TAG}bad/--prompt-ids junk" 2 "--prompt-ids: expected" "$KV" generate -m "$B/good" --prompt-ids 1,x
expect_error "${TAG}bad/--device tpu" 2 "--device: expected auto, cpu or cuda" "$KV" generate -m "$B/good" --device tpu
expect_error "${TAG}bad/--evict-at soon" 2 "--evict-at: expected turn or full, got 'soon'" \
    "$KV" chat --no-tui -m "$B/good" --evict-at soon
for v in soon 0; do
    expect_error "${TAG}bad/--attention $v" 2 \
        "--attention: expected on, off or a number of tokens, got '$v'" \
        "$KV" chat --no-tui -m "$B/good" --attention $v
done
expect_error "${TAG}bad/bench --messages without --policy" 2 "--messages: only with --policy" \
    "$KV" bench -m "$B/good" --messages "$B/none.txt"
expect_error "${TAG}bad/bench --policy -n 0" 2 "-n 0: bench --policy compares reply tokens" \
    "$KV" bench --policy -m "$B/good" -n 0
: >"$B/empty.txt"
printf '\n  \n' >"$B/blank.txt"
for f in none.txt empty.txt blank.txt .; do
    why="no message in it"
    [ "$f" = none.txt ] && why="No such file or directory"
    [ "$f" = . ] && why="Is a directory"
    expect_error "${TAG}bad/bench --policy --messages $f" 1 "--messages $B/$f: $why" \
        "$KV" bench --policy -m "$B/good" --messages "$B/$f"
done
printf '{"turns": ["a", "b"]}\n{"turns": "ab"}\n' >"$B/chats.jsonl"
expect_error "${TAG}bad/bench --policy --chats with a bad line" 1 \
    "--chats $B/chats.jsonl: line 2: not \\{\"turns\": \\[message, reply, ...\\]\\}" \
    "$KV" bench --policy -m "$B/good" --chats "$B/chats.jsonl"
expect_error "${TAG}bad/bench --policy --recall without an answer" 1 \
    "--recall $B/chats.jsonl: line 1: not .* with the question last" \
    "$KV" bench --policy -m "$B/good" --recall "$B/chats.jsonl"
expect_error "${TAG}bad/bench --policy --chats of blank lines" 1 \
    "--chats $B/blank.txt: no conversation in it \\(one JSON object a line\\)" \
    "$KV" bench --policy -m "$B/good" --chats "$B/blank.txt"
expect_error "${TAG}bad/bench --policy --chats and --recall" 2 "--chats and --recall: one track" \
    "$KV" bench --policy -m "$B/good" --chats "$B/chats.jsonl" --recall "$B/chats.jsonl"
expect_error "${TAG}bad/bench --policy --ctx of the model's positions" 1 \
    "--ctx 32: bench --policy needs a window smaller than the model's 32 positions" \
    "$KV" bench --policy -m "$B/good" --ctx 32
expect_error "${TAG}bad/bench --policy on positions too few for a turn" 1 \
    "the model's 32 positions hold no turn of conversation 1 and its 64-token replies" \
    "$KV" bench --policy -m "$B/good" --ctx 8
expect_error "${TAG}bad/bench --control without --policy" 2 "--control: only with --policy" \
    "$KV" bench -m "$B/good" --control
expect_error "${TAG}bad/bench --gate-text with --text" 2 "--gate-text with --text" \
    "$KV" bench --policy -m "$B/good" --text "$B/blank.txt" --gate-text "$B/blank.txt"
expect_error "${TAG}bad/bench --policy --gate-recall missing" 1 "$B/none.jsonl" \
    "$KV" bench --policy -m "$B/good" --ctx 16 --gate-recall "$B/none.jsonl"
expect_error "${TAG}bad/bench --text without --policy" 2 "--text: only with --policy" \
    "$KV" bench -m "$B/good" --text "$B/blank.txt"
expect_error "${TAG}bad/bench --policy with two tracks" 2 "--messages and --text: one track" \
    "$KV" bench --policy -m "$B/good" --text "$B/blank.txt" --messages "$B/blank.txt"
expect_error "${TAG}bad/bench --policy --documents 0" 2 "--documents" \
    "$KV" bench --policy -m "$B/good" --text "$B/blank.txt" --documents 0
expect_error "${TAG}bad/bench --policy --text on a model of 32 positions" 1 \
    "the model's 32 positions leave budgets too small for the text track" \
    "$KV" bench --policy -m "$B/good" --text "$B/blank.txt"
"$KV" make-tiny-model "$B/p64" --ctx 64 >/dev/null
for f in none.txt blank.txt .; do
    why="--text $B/$f: 4 tokens hold 0 documents of the model's 64 positions, not --documents 24"
    [ "$f" = none.txt ] && why="--text $B/$f: No such file or directory"
    [ "$f" = . ] && why="cannot read $B/\.: Is a directory"
    expect_error "${TAG}bad/bench --policy --text $f" 1 "$why" \
        "$KV" bench --policy -m "$B/p64" --text "$B/$f"
done
expect_error "${TAG}bad/--cache-dtype q8" 2 "--cache-dtype: expected f32, f16, bf16, int8 or q4, got 'q8'" "$KV" generate -m "$B/good" --cache-dtype q8
expect_error "${TAG}bad/--cache-dtype q4 on heads of 8" 1 "--cache-dtype q4: a head's 8 values do not fill blocks of 32" \
    "$KV" generate -m "$B/good" --cache-dtype q4 -p hi
expect_error "${TAG}bad/--dtype q5" 2 "--dtype: expected f32, bf16, f16, q8 or q4, got 'q5'" "$KV" generate -m "$B/good" --dtype q5
expect_error "${TAG}bad/--gpu-kernels turbo" 2 "--gpu-kernels: expected fast or basic, got 'turbo'" "$KV" generate -m "$B/good" --gpu-kernels turbo
expect_error "${TAG}bad/--cache-mem past 1e15 bytes" 2 "'2000T' is more than the largest size" \
    "$KV" generate -m "$B/good" --cache-mem 2000T
# block numbers are ints: a pool of more blocks is refused, not cut to its low 32 bits
expect_error "${TAG}bad/--cache-mem past the largest pool (16 TiB of 8 KiB blocks)" 1 \
    "more than the largest pool, 2147483647 blocks of" \
    "$KV" generate -m "$B/good" --cache-mem 16384G --prompt-ids 1
expect_error "${TAG}bad/--cache-mem of 2^34 + 4 blocks is no pool of 4" 1 "more than the largest pool" \
    "$KV" generate -m "$B/good" --cache-mem 35184372097024 --prompt-ids 1
expect_error "${TAG}bad/make-tiny-model heads" 2 "not a positive multiple of n_head" "$KV" make-tiny-model "$B/x" --embd 10 --heads 3

# runtime errors: exit 1, naming the file (and tensor)
expect_error "${TAG}bad/missing model dir" 1 "$B/nope does not exist" "$KV" generate -m "$B/nope"
mkdir -p "$B/empty-dir"
expect_error "${TAG}bad/a directory without config.json" 1 \
    "empty-dir has no config.json: not a Hugging Face model directory \(\`kvchat get-model NAME\` downloads one, \`kvchat make-tiny-model DIR\` makes a test one\)$" \
    "$KV" generate -m "$B/empty-dir" -p hi
expect_error "${TAG}bad/prompt id out of vocab" 1 "token id 60000 is outside the vocabulary" \
    "$KV" generate -m "$B/good" --prompt-ids 60000
expect_error "${TAG}bad/prompt longer than context" 1 "prompt is 40 tokens; the context holds 32" \
    "$KV" generate -m "$B/good" --prompt-ids "$(seq -s, 1 40)"
expect_error "${TAG}bad/--decode bad id" 1 "'99999' is not a token id" "$KV" tokenize -m "$B/good" --decode "1 99999"

while IFS='|' read -r kind pattern; do
    damage "$kind" "$kind"
    expect_error "${TAG}bad/$kind" 1 "$pattern" "$KV" generate -m "$B/$kind" -p hi -n 1
done <<'CASES'
empty|model.safetensors: file is 0 bytes, too short
truncated|model.safetensors: .*(past the end|data buffer)
header-past-eof|model.safetensors: header length [0-9]+ runs past the end of the file
header-huge|model.safetensors: header length [0-9]+ exceeds the limit
bad-json|model.safetensors: header JSON is invalid
unknown-dtype|model.safetensors: tensor '.*': unknown dtype 'F12'
int-dtype|model.safetensors: tensor 'wpe.weight' has dtype I32
missing-tensor|model.safetensors: tensor 'h.0.mlp.c_fc.weight' is missing
wrong-shape|model.safetensors: tensor 'h.0.attn.c_attn.weight' has shape \[16, 16\] but config.json implies \[16, 48\]
overlap|model.safetensors: tensor '.*': data_offsets .* overlap the previous tensor
config-embd|model.safetensors: tensor 'wte.weight' has shape \[50257, 16\] but config.json implies \[50257, 32\]
config-json|config.json: .*line
config-missing-key|config.json: missing 'n_layer'
config-heads|config.json: n_embd 16 is not a positive multiple of n_head 3
no-vocab|vocab.json: No such file
bad-merges|merges.txt: line 2 merges tokens not in the vocabulary
inf-weight|tensor 'h.0.mlp.c_fc.weight' holds a non-finite value \(inf or NaN\) at element 5 of 1024: the checkpoint is damaged
CASES
"$KV" make-tiny-model "$B/inf-q8" --layers 1 --heads 2 --embd 32 --ctx 32 >/dev/null &&
    "$PYTHON" tests/damage_checkpoint.py "$B/inf-q8" inf-weight
expect_error "${TAG}bad/inf-weight, quantised to q8" 1 \
    "tensor 'h.0.mlp.c_fc.weight' holds a non-finite value \(inf or NaN\) at element 5 of 4096" \
    "$KV" generate -m "$B/inf-q8" -p hi -n 1 --dtype q8

# hostile pytorch_model.bin files (tests/reference/torch_ckpt.py): refused by name before anything
# runs, one line, exit 1, no crash, no hang, clean under the sanitizers
if "$PYTHON" -c "import torch" 2>/dev/null; then
    H=$B/hostile
    "$PYTHON" tests/reference/torch_ckpt.py hostile "$B/good" "$H" "$B/ran"
    while IFS='|' read -r kind pattern; do
        expect_error "${TAG}bad/pytorch $kind" 1 "pytorch_model.bin: .*$pattern" "$KV" generate -m "$H/$kind" -p hi -n 1
    done <<'CASES'
os-system|refusing global 'posix.system': a checkpoint may only name tensors, storages and OrderedDict \(nothing was run\)$
eval|refusing global '__builtin__.eval'
numpy-array|refusing global 'numpy.core.multiarray._reconstruct'
exec-in-storage-type|refusing global '__builtin__.exec'
short-storage|tensor 'wte' reaches element 99 of storage '0', which holds 10$
offset-past-storage|tensor 'wte' reaches element 11 of storage '0', which holds 10$
entry-smaller-than-storage|archive/data/0: holds 40 bytes where 400 are needed$
overlapping-strides|tensor 'wte' has 4294967296 elements in a storage of 10 \(overlapping strides\)$
absurd-shape|tensor 'wte' reaches element [0-9]+ of storage '0', which holds 10$
absurd-numel|storage '0' claims 4611686018427387904 elements \(absurd\)$
missing-storage|archive/data/7: the storage is missing from the archive$
deep-nesting|the pickle holds a list, not a state dict$
mark-flood|pickle stops with 0 values and 1000000 marks left
memo-absurd|pickle memo index 2147483647 at byte 8 is absurd$
zip-bomb|archive/data/0: 67108864 bytes compressed to [0-9]+ \(a zip bomb\?\)$
truncated-zip|not a readable zip archive
truncated-legacy|runs past the end of the file \(truncated\?\)$
not-pytorch|not a PyTorch checkpoint: neither a zip archive nor a pickle stream$
empty|empty file$
CASES
    same "${TAG}bad/pytorch: no hostile checkpoint ran code" "" "$(ls "$B/ran" 2>&1 | grep -v 'No such file')"
    expect_error "${TAG}bad/convert a hostile checkpoint" 1 "refusing global 'posix.system'" "$KV" convert "$H/os-system"
    same "${TAG}bad/convert a hostile checkpoint writes nothing" "config.json merges.txt pytorch_model.bin vocab.json" \
        "$(ls "$H/os-system" | tr '\n' ' ' | sed 's/ $//')"
else
    skip "${TAG}bad/pytorch hostile files" "python3-torch is not installed (make test installs it)"
fi

# damaged and hostile files: one line, exit 1, never a crash or a hang
printf "hi\n" | "$KV" chat --no-tui -m "$B/good" -n 2 --session "$B/a.jsonl" >/dev/null
S=$B
head -1 "$S/a.jsonl" >"$S/header"
: >"$S/empty.jsonl"
printf 'this is not json\n' >"$S/garbage.jsonl"
head -c 3000 /dev/urandom >"$S/binary.jsonl"
{ cat "$S/header"; printf '{"ev":"user","conv":1,"t":0,"text":"'; head -c $((17 << 20)) /dev/zero | tr '\0' a; printf '"}\n'; } >"$S/huge.jsonl"
{ cat "$S/header"; echo '{"ev":"prefill","conv":1,"t":0,"ids":"x","cached":0}'; } >"$S/types.jsonl"
{ cat "$S/header"; echo '{"ev":"frobnicate","conv":1,"t":0}'; } >"$S/unknown.jsonl"
sed -E 's/"kvchat_session":[0-9]+/"kvchat_session":99/' "$S/header" >"$S/future.jsonl"
echo '{"ev":"user","conv":1,"t":0,"text":"hi"}' >"$S/noheader.jsonl"
{ cat "$S/header"; echo '{"ev":"token","conv":-4,"t":0,"id":1}'; } >"$S/negconv.jsonl"
# numbers no kvchat writes: a window past int range (it overflowed the panel), a preamble of 2e9 cells
# (every frame allocated 2 GB), sampling settings the command line refuses
{ cat "$S/header"; echo '{"ev":"stats","conv":1,"t":0,"window":2147483647,"tokens":1}'; } >"$S/window2g.jsonl"
{ cat "$S/header"; echo '{"ev":"prefill","conv":1,"t":0,"ids":[1,2],"cached":0,"preamble":2000000000}'; } >"$S/preamble2g.jsonl"
{ cat "$S/header"; echo '{"ev":"token","conv":1,"t":0,"id":50257}'; } >"$S/badtoken.jsonl"
{ cat "$S/header"; echo '{"ev":"set","conv":0,"t":0,"temp":1,"top_k":0,"top_p":1,"repeat_penalty":0,"seed":1,"n_predict":4}'; } >"$S/badset.jsonl"
sed -E '2,$ s/"top_p":[0-9.]+/"top_p":-1/' "$S/a.jsonl" >"$S/badsampling.jsonl"
sed -E '1 s/"repeat_penalty":[0-9.]+/"repeat_penalty":0/' "$S/a.jsonl" >"$S/badheader.jsonl"
while IFS='|' read -r f pattern; do
    expect_error "${TAG}session/bad file: $f" 1 "$pattern" "$KV" replay "$S/$f.jsonl" --no-tui
done <<'CASES'
empty|empty file, not a session
garbage|line 1 is not valid JSON
binary|line 1 is not valid JSON|not a kvchat session
huge|line 2 is longer than 16 MiB
types|line 2: prefill needs 'ids'
unknown|line 2: unknown event 'frobnicate'
future|written by a newer kvchat \(session format 99\)
noheader|not a kvchat session
negconv|line 2: events need an integer 'conv'
window2g|line 2: stats needs 'window' to be an integer in 1\.\.
preamble2g|line 2: prefill needs 'preamble' to be an integer in 0\.\.
badtoken|line 2: token needs 'id' to be an integer in 0\.\.50256
badset|line 2: set needs 'repeat_penalty' to be a number in 0\.01\.\.100
badsampling|line [0-9]+: turn_end needs 'sampling' to be sampling settings in range
badheader|the header's sampling settings are missing or out of range
CASES
expect_error "${TAG}session/resume a bad file" 1 "unknown event" "$KV" chat --no-tui --resume "$S/unknown.jsonl"

# bad sampling settings stop --verify and resume with the line that holds them
expect_error "${TAG}session/--verify a file with bad sampling" 1 "line 2: set needs 'repeat_penalty'" \
    "$KV" replay "$S/badset.jsonl" --verify -m "$B/good"
expect_error "${TAG}session/resume a file with bad sampling" 1 "line 2: set needs 'repeat_penalty'" \
    "$KV" chat --no-tui --resume "$S/badset.jsonl"

# files the chat writes: the reason, not just "cannot write"; a failing event log changes the exit status
expect_error "${TAG}bad/--session /dev/null" 1 "--session /dev/null: not a regular file" \
    "$KV" chat --no-tui -m "$B/good" -n 2 --session /dev/null
expect_error "${TAG}bad/--events /dev/full" 1 "--events /dev/full: writing failed: No space left on device" \
    bash -c "printf 'hi\\n' | '$KV' chat --no-tui -m '$B/good' -n 2 --events /dev/full >/dev/null"
expect_error "${TAG}bad/--ctx 1 names --ctx" 1 "window of 1 tokens cannot hold .*raise --ctx" \
    bash -c "printf 'hi\\n' | '$KV' chat --no-tui -m '$B/good' -n 2 --ctx 1 >/dev/null"
expect_error "${TAG}bad/a message over 256 KiB" 1 "a message of 300000 bytes is longer than a message can be \(256 KiB\)" \
    bash -c "'$PYTHON' -c \"print('a ' * 150000)\" | '$KV' chat --no-tui -m '$B/good' -n 2 >/dev/null"

# a session whose first turn failed (the pool too small) resumes, with a pool that holds the next
# turn: its conversation has no tokens, and no array of them (UBSan: a null pointer given to memcpy)
printf 'hello there friend\n' | "$KV" chat --no-tui -m "$B/good" -n 4 --cache-mem 2K \
    --session "$B/failed-first.jsonl" >/dev/null 2>&1
check "${TAG}bad/a session whose first turn failed resumes" bash -c "printf 'again\n' |
    '$KV' chat --no-tui -m '$B/good' -n 4 --resume '$B/failed-first.jsonl' --cache-mem 1M \
    >/dev/null"

# escape sequences in a session's own strings (an OSC 52 that writes the clipboard, a screen clear)
# reach the terminal as visible text, in listings and in error messages alike
mkdir -p "$B/xdg/kvchat/sessions"
printf 'hi\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --session "$B/plain.jsonl" >/dev/null 2>&1
"$PYTHON" - "$B/plain.jsonl" "$B/xdg/kvchat/sessions/evil.jsonl" "$B/missing" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
h = json.loads(lines[0])
osc = "\u001b]52;c;SGVsbG8=\u0007"
h["created"] = osc + "\u001b[2J"
h["model"]["name"] = "m" + osc
h["model"]["dir"] = sys.argv[3] + "/" + osc + "\u009b31m"
open(sys.argv[2], "w").write("\n".join([json.dumps(h)] + lines[1:]) + "\n")
PY
raw_bytes() { # the escape, bell and CSI bytes in FILE
    "$PYTHON" -c 'import sys; d = open(sys.argv[1], "rb").read()
print(sum(d.count(c) for c in (b"\x1b", b"\x07", b"\xc2\x9b")))' "$1"
}
XDG_DATA_HOME=$B/xdg "$KV" sessions >"$B/list.out" 2>&1
same "${TAG}bad/kvchat sessions escapes a header's strings" 0 "$(raw_bytes "$B/list.out")"
check "${TAG}bad/... and shows them" grep -qF '^[]52;c;SGVsbG8=^G' "$B/list.out"
XDG_DATA_HOME=$B/xdg "$KV" replay >"$B/list2.out" 2>&1
same "${TAG}bad/a bare kvchat replay escapes them" 0 "$(raw_bytes "$B/list2.out")"
"$KV" chat --no-tui --resume "$B/xdg/kvchat/sessions/evil.jsonl" </dev/null >/dev/null 2>"$B/dir.err"
same "${TAG}bad/an error quoting a recorded model.dir escapes it" 0 "$(raw_bytes "$B/dir.err")"
check "${TAG}bad/... and names it" grep -qF "$B/missing/^[]52;c;SGVsbG8=^G<U+009B>31m" "$B/dir.err"
# a drafter's directory named with escape sequences: generate --draft's summary and bench
# --speculative's table show it made safe
evil_draft="$B/draft$(printf '\033]52;c;SGVsbG8=\007')"
cp -r "$B/good" "$evil_draft"
"$KV" generate -m "$B/good" --prompt-ids 1,2,3 -n 4 --temp 0 --draft "$evil_draft" \
    >/dev/null 2>"$B/gen-draft.err"
same "${TAG}bad/generate --draft names an escaping drafter's folder made safe" "0|1" \
    "$(raw_bytes "$B/gen-draft.err")|$(grep -c '^\[draft .*draft^\[\]52' "$B/gen-draft.err")"
"$KV" bench --speculative -m "$B/good" -n 4 --runs 1 --draft "$evil_draft" >"$B/spec.out" 2>&1
same "${TAG}bad/bench --speculative's table makes it safe too" 0 "$(raw_bytes "$B/spec.out")"

# a file written whole (a dump, a /save) never replaces a device, a FIFO or another kvchat's live
# session: a FIFO is written into, a locked file refused
rm -f "$B/dump.fifo" "$B/dump.got"
mkfifo "$B/dump.fifo"
cat "$B/dump.fifo" >"$B/dump.got" &
"$KV" generate -m "$B/good" -p hi -n 2 -q --dump-logits "$B/dump.fifo" >/dev/null 2>&1
wait $!
check "${TAG}bad/--dump-logits onto a FIFO writes into it" test -p "$B/dump.fifo" -a -s "$B/dump.got"
rm -f "$B/live.jsonl" "$B/live.in"
mkfifo "$B/live.in"
"$KV" chat --no-tui -m "$B/good" -n 2 --session "$B/live.jsonl" <"$B/live.in" >/dev/null 2>&1 &
lpid=$!
exec 9>"$B/live.in"
await "the live session's first line" '[ -s "$B/live.jsonl" ]'
cp "$B/live.jsonl" "$B/live.before"
expect_error "${TAG}bad/--dump-logits onto another kvchat's live session is refused" 1 \
    "live.jsonl is being written by another kvchat" \
    "$KV" generate -m "$B/good" -p hi -n 2 -q --dump-logits "$B/live.jsonl"
check "${TAG}bad/... and the session is untouched" cmp "$B/live.jsonl" "$B/live.before"
exec 9>&-
wait $lpid

# a link planted at PATH.part is never followed (issue 46): /save, --save-cache, make-tiny-model
echo "not yours" >"$B/victim"
ln -sf "$B/victim" "$B/saved.jsonl.part"
printf 'hi\n/save %s\n' "$B/saved.jsonl" | "$KV" chat --no-tui -m "$B/good" -n 2 --no-save >/dev/null 2>&1
same "${TAG}bad//save over a planted .part link: its target untouched, the file saved" \
    "not yours|1" "$(cat "$B/victim")|$(grep -c '"ev":"turn_end"' "$B/saved.jsonl")"
ln -sf "$B/victim" "$B/cached.jsonl.kv.part"
printf 'hi\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --session "$B/cached.jsonl" --save-cache \
    >/dev/null 2>&1
same "${TAG}bad/--save-cache over a planted .part link: its target untouched, the snapshot written" \
    "not yours|yes" "$(cat "$B/victim")|$([ -s "$B/cached.jsonl.kv" ] && echo yes)"
mkdir -p "$B/tm"
ln -sf "$B/victim" "$B/tm/model.safetensors.part"
"$KV" make-tiny-model "$B/tm" --layers 1 --heads 2 --embd 16 --ctx 32 >/dev/null 2>&1
same "${TAG}bad/make-tiny-model over a planted .part link: its target untouched" \
    "not yours|yes" "$(cat "$B/victim")|$([ -s "$B/tm/model.safetensors" ] && echo yes)"
# --dump-logits replaces only an earlier dump: never the session it verifies, nor another file
printf 'hi\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --session "$B/dumped.jsonl" >/dev/null 2>&1
cp "$B/dumped.jsonl" "$B/dumped.before"
expect_error "${TAG}bad/--dump-logits onto the session being verified is refused" 1 \
    "dumped.jsonl is the file being read: choose another name" \
    "$KV" replay "$B/dumped.jsonl" --verify --dump-logits "$B/dumped.jsonl"
check "${TAG}bad/... and the session is untouched" cmp "$B/dumped.jsonl" "$B/dumped.before"
expect_error "${TAG}bad/--dump-logits onto a file that is not a dump is refused" 1 \
    "victim exists and is not a logits dump \(10 bytes, not whole rows of 201028\)" \
    "$KV" generate -m "$B/good" -p hi -n 1 -q --dump-logits "$B/victim"
"$KV" generate -m "$B/good" -p hi -n 1 -q --dump-logits "$B/dump.bin" >/dev/null
check "${TAG}bad/--dump-logits replaces an earlier dump" \
    "$KV" generate -m "$B/good" -p hi -n 1 -q --dump-logits "$B/dump.bin"
# GPT-2's token 188 is the byte 0: a reply holding it is written as \u0000 and read back; a message
# with a Latin-1 byte is read as Latin-1, recorded, and the session stays whole
"$PYTHON" - "$B/dumped.jsonl" "$B/nul.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for ev in lines:
    if ev.get("ev") == "token":
        ev["text"] = "a\u0000b"
    if ev.get("ev") == "turn_end":
        ev["reply"] = "before\u0000after"
open(sys.argv[2], "w").write("".join(json.dumps(ev) + "\n" for ev in lines))
PY
check "${TAG}bad/a reply holding the byte 0 replays" bash -c "'$KV' replay '$B/nul.jsonl' --no-tui >/dev/null"
same "${TAG}bad/... all of its text shown" "gpt-2: before^@after" \
    "$("$KV" replay "$B/nul.jsonl" --no-tui 2>&1 | cat -v | grep -o 'gpt-2: .*')"
check "${TAG}bad/... and resumes" bash -c "printf 'more\n' | '$KV' chat --no-tui --resume '$B/nul.jsonl' -n 2 >/dev/null"
printf 'caf\xe9 au lait\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --session "$B/latin1.jsonl" \
    >/dev/null 2>"$B/latin1.err"
same "${TAG}bad/a Latin-1 byte in a message is read as Latin-1 and recorded" "café au lait" \
    "$("$PYTHON" -c 'import json, sys; print([json.loads(l)["text"] for l in open(sys.argv[1]) if "\"user\"" in l][0])' "$B/latin1.jsonl")"
check "${TAG}bad/... saying so" grep -q "the message had 1 byte that is not UTF-8: read as Latin-1" \
    "$B/latin1.err"
check "${TAG}bad/... and the session verifies" "$KV" replay "$B/latin1.jsonl" --verify
check "${TAG}bad/--system with a Latin-1 byte is taken" bash -c \
    "printf 'hi\n' | '$KV' chat --no-tui -m '$B/good' -n 2 --system \$'na\\xefve' --no-save >/dev/null"
# a folder's name and a recorded preamble reach the terminal as text (issue 46, item 14)
evil="$B/$(printf 'evil\033[31m')"
rm -rf "$evil" && cp -r "$B/good" "$evil"
"$KV" info -m "$evil" >"$B/info.out" 2>&1
same "${TAG}bad/info shows a folder's escape sequence as text" "no ESC|^[" \
    "$(grep -q $'\033' "$B/info.out" && echo ESC || echo no ESC)|$(grep -o '\^\[' "$B/info.out" | head -1)"
printf '/system \033[31mred\n/system\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --no-save \
    >/dev/null 2>"$B/sys.err"
same "${TAG}bad/line mode's /system says the preamble as text" "no ESC" \
    "$(grep -q $'\033' "$B/sys.err" && echo ESC || echo no ESC)"
# line mode: /show says why nothing is saved; conversations are bounded as in the full-screen chat
printf '/show\n' | "$KV" chat --no-tui -m "$B/good" -n 2 2>"$B/show.err" >/dev/null
check "${TAG}bad/line mode's /show: not saved, and how to save" \
    grep -q "session: not saved (line mode saves with --session FILE)" "$B/show.err"
for i in $(seq 70); do echo /new; done | "$KV" chat --no-tui -m "$B/good" -n 2 --no-save \
    >/dev/null 2>"$B/new.err"
same "${TAG}bad/line mode refuses /new past 64 conversations" "63|7" \
    "$(grep -c '^conversation [0-9]*$' "$B/new.err")|$(grep -c 'this chat holds 64' "$B/new.err")"
# a "\"\"\"" block still open when the input ends is said, not dropped (exit 1)
expect_error "${TAG}bad/an open \"\"\" block at the end of the input" 1 \
    'the input ended inside a """ block: that message was not sent' \
    bash -c "printf '\"\"\"\nline one\n' | '$KV' chat --no-tui -m '$B/good' -n 2 --no-save"
# a message the window cannot take is said and the next one is read (exit 1 at the end)
"$KV" chat --no-tui -m "$B/good" -n 4 --ctx 24 --session "$B/room.jsonl" \
    < <(printf 'hello\n/pin 1\n/pin 2\nthis message needs more room than the pinned turns leave\nbye\n') \
    >/dev/null 2>"$B/room.err"
rc=$?
same "${TAG}bad/line mode: a message with no room is said, the chat reads on, exit 1" \
    "1|2|3" "$rc|$(grep -c 'cannot make room' "$B/room.err")|$(grep -c '"ev":"user"' "$B/room.jsonl")"
# the spellings users bring: llama-cli's -c/--ctx-size, --n-predict, -s; ollama's /? and /bye
printf 'hi\n/?\n/bye\nnot sent\n' | "$KV" chat --no-tui -m "$B/good" -c 32 --n-predict 3 -s 5 \
    --session "$B/habits.jsonl" >/dev/null 2>"$B/habits.err"
same "${TAG}bad/-c, --n-predict, -s, /? and /bye are understood" "0|1|1|32|3|5" \
    "$?|$(grep -c '^  /new' "$B/habits.err")|$(grep -c '"ev":"user"' "$B/habits.jsonl")|$("$PYTHON" -c '
import json, sys
h = json.loads(open(sys.argv[1]).readline())
print("%d|%d|%d" % (h["cache"]["window"], h["sampling"]["n_predict"], h["sampling"]["seed"]))' "$B/habits.jsonl")"
# perplexity: its text, its windows, its base run
printf 'The quick brown fox jumps over the lazy dog, again and again and again.\n' >"$B/ppl.txt"
expect_error "${TAG}bad/perplexity without a text" 2 "no text to measure" \
    "$KV" perplexity -m "$B/good"
expect_error "${TAG}bad/perplexity of a missing file" 1 "none.txt: No such file or directory" \
    "$KV" perplexity -m "$B/good" "$B/none.txt"
expect_error "${TAG}bad/perplexity of a folder" 1 "cannot read $B: Is a directory" \
    "$KV" perplexity -m "$B/good" "$B"
expect_error "${TAG}bad/perplexity --stride 0" 2 "--stride: expected" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --stride 0
expect_error "${TAG}bad/perplexity --stride past the window" 1 "--stride 40: at most the window" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --stride 40
# perplexity's outputs: never over an input, nor over a file that is no earlier output of theirs
# (unless --force), checked before anything is measured; a window of 1; a damaged base run
cp "$B/ppl.txt" "$B/ppl-keep.txt"
expect_error "${TAG}bad/perplexity --save-logits over the text it reads" 1 \
    "--save-logits $B/ppl.txt: a file this run reads" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --save-logits "$B/ppl.txt"
same "${TAG}bad/... and the text is as it was" "" "$(cmp "$B/ppl.txt" "$B/ppl-keep.txt" 2>&1)"
expect_error "${TAG}bad/perplexity --json over the model's weights" 1 \
    "model.safetensors: a file this run reads" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --json "$B/good/model.safetensors" --force
echo "my notes" >"$B/notes.txt"
expect_error "${TAG}bad/perplexity --json over a file that is not its output" 1 \
    "notes.txt exists and is not an earlier --json output: remove it, choose another name or give" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --json "$B/notes.txt"
same "${TAG}bad/... and the file is as it was" "my notes" "$(cat "$B/notes.txt")"
expect_error "${TAG}bad/perplexity --save-logits over a session" 1 \
    "is not an earlier --save-logits output" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --save-logits "$B/habits.jsonl"
for args in "--ctx 1" "--ctx 1 --positions"; do
    expect_error "${TAG}bad/perplexity $args: a window of 1, at once" 1 \
        "a window of 1 position: perplexity needs 2 or more" \
        timeout 60 "$KV" perplexity -m "$B/good" "$B/ppl.txt" $args
done
"$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --save-logits "$B/ppl.good" -q >/dev/null
"$PYTHON" -c 'import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
inf, neg = bytearray(d), bytearray(d)
struct.pack_into("<H", inf, 16 + 12 + 10, 0x7C00)  # a log-probability of row 0: +inf
struct.pack_into("<i", neg, 12, -3)  # the count
open(sys.argv[2], "wb").write(inf); open(sys.argv[3], "wb").write(neg)' \
    "$B/ppl.good" "$B/ppl.inf" "$B/ppl.neg"
expect_error "${TAG}bad/perplexity --kl-divergence of a base with a number that is not finite" 1 \
    "ppl.inf: token 0 \(id [0-9]+\) holds a number that is not finite" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --kl-divergence "$B/ppl.inf"
expect_error "${TAG}bad/perplexity --kl-divergence of a base with a negative count" 1 \
    "ppl.neg: a base run of -3 tokens" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --kl-divergence "$B/ppl.neg"
# SIGTERM (and SIGHUP) leave no FILE.part behind --save-logits
head -c 20000 README.md >"$B/long.txt"
"$KV" perplexity -m "$B/good" "$B/long.txt" --ctx 32 --save-logits "$B/term.bin" -q \
    >/dev/null 2>&1 &
pid=$!
for _ in $(seq 600); do [ -e "$B/term.bin.part" ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid 2>/dev/null
wait $pid
same "${TAG}bad/perplexity --save-logits stopped by SIGTERM leaves no part file" "" \
    "$(ls "$B" | grep '^term.bin')"
# --repeat and --recall: their windows, their chats
expect_error "${TAG}bad/perplexity --repeat in too small a window" 1 \
    "--repeat: a window of 32 positions; a passage, 150 tokens of other text and the passage" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --repeat
expect_error "${TAG}bad/perplexity --repeat --json" 2 "--repeat: no --positions, --stride" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --repeat --json "$B/r.json"
expect_error "${TAG}bad/perplexity --recall with a text" 2 "no text or --repeat with it" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --recall "$B/ppl.txt"
expect_error "${TAG}bad/perplexity --recall of a missing file" 1 "none.jsonl: No such file" \
    "$KV" perplexity -m "$B/good" --recall "$B/none.jsonl"
expect_error "${TAG}bad/perplexity --recall of a text" 1 "line 1: not {\"turns\"" \
    "$KV" perplexity -m "$B/good" --recall "$B/ppl.txt"
printf '{"turns": ["I am Ann.", "Yes.", "Who am I?"], "answer": "You are Ann.", "fill": "Bo"}\n' \
    >"$B/nofill.jsonl"
expect_error "${TAG}bad/perplexity --recall of a chat whose answer lacks its fill" 1 \
    "--recall $B/nofill.jsonl: line 1: no \"fill\" inside its answer" \
    "$KV" perplexity -m "$B/good" --recall "$B/nofill.jsonl"
expect_error "${TAG}bad/bench --policy --recall of a chat whose answer lacks its fill" 1 \
    "--recall $B/nofill.jsonl: line 1: no \"fill\" inside its answer" \
    "$KV" bench --policy -m "$B/good" --recall "$B/nofill.jsonl"
printf '{"turns": ["%s", "Yes.", "Who am I?"], "answer": "You are Ann.", "fill": "Ann"}\n' \
    "$(printf 'very long %.0s' {1..40})" >"$B/long.jsonl"
expect_error "${TAG}bad/perplexity --recall of chats longer than the window" 1 \
    "no chat fits the window of 32 positions" "$KV" perplexity -m "$B/good" --recall "$B/long.jsonl"
expect_error "${TAG}bad/perplexity of too short a text" 1 "too few for a window" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 32 --stride 2
expect_error "${TAG}bad/perplexity --kl-divergence of a file that is no base run" 1 \
    "not a kvchat perplexity --save-logits file" \
    "$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --kl-divergence "$B/ppl.txt"
"$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --save-logits "$B/ppl.base" -q >/dev/null
same "${TAG}bad/perplexity --tokens 5 scores five, and -n is no limit of it" "tokens scored: 5" \
    "$("$KV" perplexity -m "$B/good" "$B/ppl.txt" --ctx 8 --tokens 5 -n 2 -q 2>&1 | head -1)"
expect_error "${TAG}bad/perplexity --kl-divergence against another text's run" 1 \
    "the base run scored [0-9]+ tokens, this one scores [0-9]+" \
    "$KV" perplexity -m "$B/good" "$B/habits.err" --ctx 8 --kl-divergence "$B/ppl.base"

# Under a memory limit a chat works or ends with a one-line error; it never hangs (issue 46:
# OpenBLAS retried its buffer's mapping for ever, in a GEMM or in the thread pool its constructor
# starts, which exit then joined). Limits rise by 1/16 from where kvchat starts at all (the loader
# maps the libraries) to where a chat works. ASan maps terabytes of shadow: not under a limit.
if [ "$TAG" != asan: ]; then
    limited() { # limited KIB CMD...: CMD under `ulimit -v KIB`, stdin a message, ended past WAIT_MAX
        timeout "${WAIT_MAX:-180}" bash -c 'ulimit -v "$1" && shift && exec "$@"' _ "$@" \
            <<<"hello" >/dev/null 2>"$B/ulimit.err"
    }
    oom_said() { # oom_said RC: exit 1 and one line saying so (the command's, or a turn's)
        [ "$1" = 1 ] && [ "$(wc -l <"$B/ulimit.err")" = 1 ] &&
            grep -qE '^kvchat( chat)?: .*(out of memory|Cannot allocate memory)' "$B/ulimit.err"
    }
    kib=$((64 << 10)) bad= named=0 worked=
    while [ -z "$worked" ] && [ -z "$bad" ] && [ "$kib" -le $((16 << 20)) ]; do
        if limited "$kib" "$KV" --version; then
            limited "$kib" "$KV" chat --no-tui -m "$B/good" -n 4 --no-save
            rc=$?
            if [ "$rc" = 0 ]; then
                worked=$kib
            elif ! oom_said "$rc"; then
                bad="ulimit -v $kib: exit $rc, $(head -c 300 "$B/ulimit.err" | tr '\n' ' ')"
            fi
            grep -q "OpenBLAS's work buffers" "$B/ulimit.err" && named=$((named + 1))
        fi
        kib=$((kib + kib / 16))
    done
    same "${TAG}bad/under ulimit -v a chat works or says it is out of memory, no hang" \
        "works" "${bad:-${worked:+works}}"
    check "${TAG}bad/under ulimit -v the limit OpenBLAS's buffers miss is said" test "$named" -gt 0
    # The same over a 124M shape on two threads, every limit from where it loads to well past where
    # it works: a limit that hung (issue 63: the second thread's BLAS buffer, taken at the first
    # GEMM the two threads ran at once) lay between limits that worked.
    "$KV" make-tiny-model "$B/m124" --layers 12 --heads 12 --embd 768 --ctx 1024 --dtype bf16 \
        >/dev/null
    kib=$((600 << 10)) bad= worked=0
    while [ -z "$bad" ] && [ "$kib" -le $((1600 << 10)) ]; do
        limited "$kib" "$KV" chat --no-tui -m "$B/m124" -n 4 --no-save -t 2
        rc=$?
        [ "$rc" = 0 ] && worked=$((worked + 1))
        if [ "$rc" != 0 ] && ! oom_said "$rc"; then
            bad="ulimit -v $kib: exit $rc, $(head -c 300 "$B/ulimit.err" | tr '\n' ' ')"
        fi
        kib=$((kib + kib / 24))
    done
    same "${TAG}bad/under ulimit -v a 124M chat works or says it is out of memory at every limit" \
        "works" "${bad:-$([ "$worked" -gt 3 ] && echo works || echo "worked at only $worked")}"
    rm -rf "$B/m124"
fi

# a mistyped --draft names the values it takes, before any work; a folder without a checkpoint
# names the file it lacks, with no "(line -1)"
expect_error "${TAG}bad/--draft typo lists the values" 2 \
    "^kvchat generate: --draft selfq8: expected lookup, self-q8, off or a GPT-2 checkpoint directory" \
    "$KV" generate -m "$B/good" --prompt-ids 1,2 -n 2 --draft selfq8
mkdir -p "$B/not-a-model"
expect_error "${TAG}bad/--draft folder without a checkpoint" 1 \
    "draft model .*not-a-model: unable to open .*not-a-model/config.json: No such file or directory$" \
    "$KV" generate -m "$B/good" --prompt-ids 1,2 -n 2 --draft "$B/not-a-model"
"$KV" bench --speculative -m "$B/good" -n 4 --runs 1 --draft lookup,bogus >/dev/null 2>"$B/spec-typo.err"
same "${TAG}bad/bench --speculative --draft typo fails before measuring" "1" \
    "$(grep -c -- '--draft bogus: expected lookup, self-q8, off' "$B/spec-typo.err")"

# a session's draft_max past what an int holds is refused, not read as its low bits (4294967300
# read as 4)
printf 'hi\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --draft lookup --session "$B/draft.jsonl" \
    >/dev/null 2>&1
"$PYTHON" - "$B/draft.jsonl" "$B/draft-big.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
h = json.loads(lines[0])
h["chat"]["draft_max"] = 4294967300
lines[0] = json.dumps(h)
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
expect_error "${TAG}bad/a session's draft_max of 2^32 + 4 is out of range" 1 \
    "draft-big.jsonl: the session's draft settings are out of range" \
    "$KV" replay "$B/draft-big.jsonl" --verify

# make-tiny-model --vocab V writes the tokenizer of GPT-2's first V ids, so the checkpoint loads
"$KV" make-tiny-model "$B/v300" --vocab 300 >/dev/null
same "${TAG}bad/make-tiny-model --vocab 300 makes a checkpoint kvchat loads, of 300 ids" "0 300" \
    "$("$KV" generate -m "$B/v300" -p "the cat" -n 3 --output ids -q >/dev/null 2>&1; echo $?) $(
    "$PYTHON" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$B/v300/vocab.json")"

# --system with a byte that is not UTF-8, in a saved session: read as Latin-1 and said, as a
# message's is (the session's header failed to be written: "unknown error", exit 1)
printf 'hi\n' | "$KV" chat --no-tui -m "$B/good" -n 2 --system "$(printf 'caf\351')" \
    --session "$B/latin1.jsonl" >/dev/null 2>"$B/latin1.err"
same "${TAG}bad/--system with a Latin-1 byte: saved, said, and the session verifies" "0 1 0" \
    "$?$(grep -c 'system had 1 byte that is not UTF-8: read as Latin-1' "$B/latin1.err" | sed 's/^/ /') $(
    "$KV" replay "$B/latin1.jsonl" --verify >/dev/null 2>&1; echo $?)"
