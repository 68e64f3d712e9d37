# The C forward pass against the independent float64 NumPy GPT-2 (tests/reference/gpt2_ref.py) on
# several tiny shapes and all three checkpoint dtypes: last-position logits to a relative L2 error
# under 1e-5, and greedy decoding with the cache = without it = NumPy. Sourced by run.sh.

REF=tests/reference/gpt2_ref.py
IDS=464,3290,373,1043,287,257,2214,50256,0,31373,995,13
# logits_case NAME DIR DTYPE: NumPy rounds as kvchat's DTYPE weights do (a no-op on a file of that type).
# With bf16, an activation NumPy finds at a near-tie may round the other way in kvchat's f32
# arithmetic: the case then passes if NumPy rounding one or two of its near-ties the other way agrees.
ref_logits() { # ref_logits DIR DTYPE [FLIPS]: NumPy's logits in $TMP/r.npy, its near-ties in $TMP/r.err
    FLIP=${3:-} ROUND=$([ "$2" = f32 ] || echo "$2") "$PYTHON" "$REF" "$1" logits "$IDS" "$TMP/r.npy" 2>"$TMP/r.err"
}
logits_case() {
    local name=$1 dir=$2 dt=$3 e f ties i j
    "$KV" generate -m "$dir" --dtype "$dt" --cache-dtype f32 --prompt-ids "$IDS" -n 1 --temp 0 -q --dump-logits "$TMP/c.bin" >/dev/null &&
        ref_logits "$dir" "$dt" || { fail "$name" "a run failed"; return; }
    e=$(rel_err "$TMP/c.bin" "$TMP/r.npy")
    if under "$e" 1e-5; then pass "$name (rel err $e)"; return; fi
    ties=$(sed -n 's/^near-ties //p' "$TMP/r.err")
    ties=${ties:-0}
    [ "$ties" -le 24 ] || ties=24
    for ((i = 0; i < ties; i++)); do
        for ((j = i; j < ties; j++)); do
            ref_logits "$dir" "$dt" "$i,$j" || break 2
            f=$(rel_err "$TMP/c.bin" "$TMP/r.npy")
            if under "$f" 1e-5; then
                pass "$name (rel err $f with NumPy's $([ $i = $j ] && echo "near-tie $i" || echo "near-ties $i and $j") rounded the other way; $e without)"
                return
            fi
        done
    done
    fail "$name" "relative L2 error $e (limit 1e-5; no one or two of NumPy's near-ties rounded the other way explain it)"
}

R=$TMP/ref
shapes=("1 1 16 32" "2 4 64 64" "3 3 48 40")
for s in "${shapes[@]}"; do
    read -r L H E C <<<"$s"
    for dt in f32 f16 bf16; do
        dir=$R/l$L-h$H-e$E-$dt
        "$KV" make-tiny-model "$dir" --layers "$L" --heads "$H" --embd "$E" --ctx "$C" --dtype "$dt" --seed "$L$E" >/dev/null
        logits_case "${TAG}ref/logits ${L}x${E}x${H} $dt" "$dir" "$dt"
    done
done

# f32 checkpoint converted at load: NumPy rounds the same matrices the same way
for dt in bf16 f16; do
    logits_case "${TAG}ref/logits f32 file as --dtype $dt" "$R/l2-h4-e64-f32" "$dt"
done
# other layouts of the same format
"$KV" make-tiny-model "$R/prefixed" --layers 2 --heads 2 --embd 32 --ctx 32 --prefix --no-mask >/dev/null
logits_case "${TAG}ref/logits transformer.-prefixed names, no mask buffers" "$R/prefixed" f32
# 8-bit weights against NumPy's q8 model (ROUND=q8: the same blocks, scales and quantised inputs, in
# float64 otherwise), to the f32 limit (measured 1.4e-7): scales kept in f32 instead of f16 give 1.2e-2,
# halves rounded to even instead of away from zero 3.4e-5.
# What q8 costs against f32 weights is measured, not tested: tests/peer/accuracy.sh and the README.
logits_case "${TAG}ref/logits 2x64x4 as --dtype q8" "$R/l2-h4-e64-f32" q8
logits_case "${TAG}ref/logits prefixed names as --dtype q8" "$R/prefixed" q8
expect_error "${TAG}ref/q8 needs widths in blocks of 32" 1 "q8 weights need widths that are multiples of 32, not 48" \
    "$KV" generate -m "$R/l3-h3-e48-f16" --dtype q8 --prompt-ids 1 -n 1
# 4-bit weights against NumPy's q4_0 model (ROUND=q4: llama.cpp's blocks in its float32 operations,
# the embedding in 6-bit blocks, the inputs quantised as for q8), to the same limit; an f16
# checkpoint too; 32 wide: an odd count of blocks
logits_case "${TAG}ref/logits 2x64x4 as --dtype q4" "$R/l2-h4-e64-f32" q4
logits_case "${TAG}ref/logits f16 file as --dtype q4" "$R/l2-h4-e64-f16" q4
logits_case "${TAG}ref/logits prefixed names as --dtype q4" "$R/prefixed" q4
expect_error "${TAG}ref/q4 needs widths in blocks of 32" 1 "q4 weights need widths that are multiples of 32, not 48" \
    "$KV" generate -m "$R/l3-h3-e48-f16" --dtype q4 --prompt-ids 1 -n 1

for s in "2 4 64 64" "3 3 48 40"; do
    read -r L H E C <<<"$s"
    dir=$R/l$L-h$H-e$E-f32
    want=$("$PYTHON" "$REF" "$dir" greedy 464,3290 20)
    g="$KV generate -m $dir --dtype f32 --prompt-ids 464,3290 -n 20 --temp 0 --repeat-penalty 1 -q --output ids"
    same "${TAG}ref/greedy with cache = NumPy (${L}x${E})" "$want" "$($g)"
    same "${TAG}ref/greedy without cache = NumPy (${L}x${E})" "$want" "$($g --no-cache)"
done

# Where a reply's tokens read (--attention 1: each decode step's weight per turn) against NumPy's
# own softmax weights of the same window, rebuilt from the events, in several windows: through
# evictions (the windows slide), a pinned turn and the kept prefix, to 1e-5.
msgs=$'hello there\nhow are you today my friend\n/pin 2\ntell me more about the cache\nwhat next'
msgs+=$'\nand then what happens after that\none more'
for ctx in 36 48 64; do
    name="${TAG}ref/attention per turn = NumPy's weights (--ctx $ctx, a pin, keep 3)"
    if ! echo "$msgs" | "$KV" chat --no-tui --no-save -m "$R/l2-h4-e64-f32" --dtype f32 \
        --cache-dtype f32 -n 10 --temp 0 --template none --keep 3 --ctx $ctx --attention 1 \
        --force --events "$TMP/att.jsonl" >/dev/null 2>"$TMP/att.err"; then
        fail "$name" "the chat failed: $(tail -1 "$TMP/att.err")"
        continue
    fi
    evictions=$(grep -c '"ev":"evict"' "$TMP/att.jsonl")
    if ! out=$(cd tests/reference && "$PYTHON" attention_ref.py "$R/l2-h4-e64-f32" \
        "$TMP/att.jsonl" 2>&1); then
        fail "$name" "$out"
    elif [ "$ctx" != 64 ] && [ "$evictions" = 0 ]; then
        fail "$name" "no eviction came"
    else
        pass "$name ($out, $evictions evictions)"
    fi
done

# bench --policy's figures (KL(full || evicted) and top-1 agreement at every reply token, by each
# rule) against NumPy's distributions for the same windows, rebuilt from what its --json records:
# the built-in chat with replies drawn, and held-out conversations and a recall one, given.
P=$R/policy
"$KV" make-tiny-model "$P" --layers 2 --heads 4 --embd 64 --ctx 160 --seed 7 >/dev/null
"$PYTHON" - "$TMP/chats.jsonl" "$TMP/recall.jsonl" <<'PY'
import json, sys
talk = ["Good morning, how do you do?", "Very well, I thank you.", "Shall we walk to the town?",
        "With pleasure, if it does not rain.", "What news from Bath?", "None that I have heard.",
        "Is your sister at home?", "She went to Lyme on Monday.", "When will she come back?",
        "Not before the end of the month, I fear."]
with open(sys.argv[1], "w") as f:
    for k in range(3):
        f.write(json.dumps({"turns": talk[k:] + talk[:k]}) + "\n")
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"turns": ["My name is Louisa.", "I shall remember it."] + talk[:6]
                        + ["What is my name?"], "answer": "Your name is Louisa.",
                        "fill": "Louisa"}) + "\n")
PY
for track in "" "--chats $TMP/chats.jsonl" "--recall $TMP/recall.jsonl"; do
    name="${TAG}ref/bench --policy${track:+ ${track%% *}}: KL and top-1 = NumPy's (--ctx 48, 7 rules)"
    chats=() # the recall chats: their answers' fill tokens checked too
    [[ $track == --recall* ]] && chats=("$TMP/recall.jsonl")
    # shellcheck disable=SC2086
    if ! "$KV" bench --policy -m "$P" --dtype f32 --cache-dtype f32 --ctx 48 -n 8 $track \
        --json "$TMP/policy.json" >"$TMP/policy.out" 2>&1; then
        fail "$name" "the bench failed: $(tail -1 "$TMP/policy.out")"
    elif ! out=$(cd tests/reference && "$PYTHON" policy_ref.py "$P" "$TMP/policy.json" \
        "${chats[@]}" 2>&1); then
        fail "$name" "$out"
    elif [[ $track == --recall* && $out != *" fill tokens"* || $out == *" 0 fill tokens"* ]]; then
        fail "$name" "no fill token checked: $out"
    elif ! grep -q '^oracle  *[1-9]' "$TMP/policy.out" || [[ $out == *" 0 oracle picks"* ]]; then
        fail "$name" "no window lost history: $(grep -m1 '^oracle' "$TMP/policy.out")"
    else
        pass "$name ($out)"
    fi
done

# --control runs the track again on random weights of the model's shape and puts the two side by
# side; the model's gates come first, and where they were not measured (160 positions hold no
# repeat passage; no recall chats beside the file) no rule may be ranked, on either model
name="${TAG}ref/bench --policy --control: the control's rows beside the model's, no rule ranked"
if ! TMPDIR=$TMP "$KV" bench --policy -m "$P" --dtype f32 --cache-dtype f32 --ctx 48 -n 8 \
    --chats "$TMP/chats.jsonl" --control --json "$TMP/control.json" >"$TMP/control.out" 2>&1; then
    fail "$name" "the bench failed: $(tail -1 "$TMP/control.out")"
elif ! out=$("$PYTHON" - "$TMP/control.json" "$TMP/control.out" "$TMP" <<'PY'
import glob, json, sys
doc = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read()
m, c = doc["model"], doc["control"]
rules = lambda d: sorted((r["rule"], r["window"]) for r in d["rules"])
assert rules(m) == rules(c) and len(rules(m)) == 7, "the two runs' rules differ"
assert m["model_gates"]["holds"] is False and "repeat" not in m["model_gates"], m["model_gates"]
ranked = [r["rule"] for d in (m, c) for r in d["rules"] if not r["verdict"].startswith("(")
          and r["verdict"] != "no difference measured"]
assert not ranked, "ranked without gates: %s" % ranked
assert m["rules"][0]["figures"] != c["rules"][0]["figures"], "the control read the same weights"
assert "repeat: not measured" in text and "the model and its control" in text, "no gates or table"
assert not glob.glob(sys.argv[3] + "/kvchat-control-*"), "the control's folder was left"
print("7 rules on each, every verdict 'no difference measured'")
PY
); then
    fail "$name" "$out"
else
    pass "$name ($out)"
fi

# bench --policy's text track against a NumPy GPT-2 that keeps its own cache: every eviction is
# the rule's choice (by NumPy's attention for H2O and TOVA), and every token's KL, top-1 and loss
# are those of NumPy's runs replaying it (exact recomputes, shift and the token rules do not).
LC_ALL=C tr -cd '\n -~' <README.md | head -c 6000 >"$TMP/text.txt" # ASCII: no character cut
"$KV" make-tiny-model "$TMP/text-m" --layers 2 --heads 4 --embd 64 --ctx 64 --seed 5 >/dev/null
name="${TAG}ref/bench --policy --text: evictions, KL, top-1 and loss = NumPy's (6 rules, 3 budgets)"
if ! "$KV" bench --policy --text "$TMP/text.txt" -m "$TMP/text-m" --documents 2 -t 1 --dtype f32 \
    --cache-dtype f32 --json "$TMP/text.json" >"$TMP/text.out" 2>&1; then
    fail "$name" "the bench failed: $(tail -1 "$TMP/text.out")"
elif ! ids=$("$KV" tokenize <"$TMP/text.txt" | tr ' ' ',') || [ -z "$ids" ]; then
    fail "$name" "kvchat tokenize gave no ids for the text"
elif out=$(cd tests/reference && "$PYTHON" text_ref.py "$TMP/text-m" "$ids" "$TMP/text.json" 2>&1)
then
    pass "$name ($out)"
else fail "$name" "$out"; fi

# kvchat perplexity against NumPy: each scored token's loss and the PPL (llama-perplexity's windows,
# and --positions), and --kl-divergence's mean KL, 99th percentile and top-1 agreement against a
# base run (an int8 cache's) recomputed from its saved rows and NumPy's distributions.
LC_ALL=C tr -cd '\n -~' <README.md | head -c 1500 >"$TMP/ppl.txt"
ppl_ids=$("$KV" tokenize <"$TMP/ppl.txt" | tr ' ' ',')
M=$R/l2-h4-e64-f32
for mode in "--stride 16" "--positions" "--positions --stride 12"; do
    name="${TAG}ref/perplexity $mode: losses and PPL = NumPy's"
    stride=${mode#--stride }
    [ "$mode" = --positions ] && stride=48
    [ "$mode" = "--positions --stride 12" ] && stride=p12
    if ! "$KV" perplexity -m "$M" "$TMP/ppl.txt" --dtype f32 --cache-dtype f32 --ctx 48 $mode \
        --json "$TMP/ppl.json" -q >"$TMP/ppl.out" 2>&1; then
        fail "$name" "$(tail -1 "$TMP/ppl.out")"
    elif out=$(cd tests/reference && "$PYTHON" ppl_ref.py "$M" "$ppl_ids" 48 "$stride" \
        "$TMP/ppl.json" 2>&1); then
        pass "$name ($out)"
    else fail "$name" "$out"; fi
done
name="${TAG}ref/perplexity --kl-divergence against an int8 cache's run = NumPy's"
if ! "$KV" perplexity -m "$M" "$TMP/ppl.txt" --dtype f32 --cache-dtype int8 --ctx 48 --positions \
    --save-logits "$TMP/ppl-base.bin" -q >"$TMP/ppl.out" 2>&1 ||
    ! "$KV" perplexity -m "$M" "$TMP/ppl.txt" --dtype f32 --cache-dtype f32 --ctx 48 --positions \
        --kl-divergence "$TMP/ppl-base.bin" --json "$TMP/ppl-kl.json" -q >"$TMP/ppl.out" 2>&1; then
    fail "$name" "$(tail -1 "$TMP/ppl.out")"
elif out=$(cd tests/reference && "$PYTHON" ppl_ref.py "$M" "$ppl_ids" 48 48 \
    "$TMP/ppl-kl.json" "$TMP/ppl-base.bin" 2>&1); then
    pass "$name ($out)"
else fail "$name" "$out"; fi

# perplexity --repeat and --recall against NumPy: the passages read twice and the losses of both
# readings; the recall chats as the template writes them (bpe_ref.py encoding), the fill's tokens
# and the top-1 guesses of each, with the fact and without it.
CM=$TMP/copy-m
"$KV" make-tiny-model "$CM" --layers 2 --heads 2 --embd 32 --ctx 400 --seed 11 >/dev/null
LC_ALL=C tr -cd '\n -~' <README.md | head -c 5000 >"$TMP/repeat.txt"
name="${TAG}ref/perplexity --repeat: passages and both readings' losses = NumPy's"
if ! "$KV" perplexity -m "$CM" "$TMP/repeat.txt" --repeat --dtype f32 --cache-dtype f32 \
    >"$TMP/repeat.out" 2>&1; then
    fail "$name" "$(tail -1 "$TMP/repeat.out")"
elif ! ids=$("$KV" tokenize <"$TMP/repeat.txt" | tr ' ' ',') || [ -z "$ids" ]; then
    fail "$name" "kvchat tokenize gave no ids for the text"
elif out=$(cd tests/reference && "$PYTHON" copy_ref.py repeat "$CM" "$ids" "$TMP/repeat.out" 2>&1)
then
    pass "$name ($out)"
else fail "$name" "$out"; fi
cat >"$TMP/recall.jsonl" <<'JSON'
{"turns": ["My name is Wentworth.", "I understand.", "Is it far?", "Not far at all.", "What is my name?"], "answer": "Your name is Wentworth.", "fill": "Wentworth"}
{"turns": ["I have a velvet kettle.", "So I see.", "Do you walk?", "Every day, sir.", "And you?", "Seldom.", "What do I have?"], "answer": "You have a velvet kettle.", "fill": "a velvet kettle"}
{"turns": ["Our house is number 347.", "I shall remember it.", "Good.", "Yes.", "What is the number of our house?"], "answer": "Your house is number 347.", "fill": "347"}
JSON
name="${TAG}ref/perplexity --recall: fill tokens and top-1 guesses with and without the fact = NumPy's"
if ! "$KV" perplexity -m "$CM" --recall "$TMP/recall.jsonl" --dtype f32 --cache-dtype f32 \
    >"$TMP/recall.out" 2>&1; then
    fail "$name" "$(tail -1 "$TMP/recall.out")"
elif out=$(cd tests/reference && "$PYTHON" copy_ref.py recall "$CM" "$TMP/recall.jsonl" \
    "$TMP/recall.out" 2>&1); then
    pass "$name ($out)"
else fail "$name" "$out"; fi

# The models kvchat ships (assets/models, made by tests/train/make_models.sh; CI never trains):
# their files are the ones their checksums name, and kvchat's logits on them are NumPy's.
name="${TAG}ref/the shipped models' files match assets/models/SHA256SUMS"
if out=$(cd assets/models && sha256sum --quiet -c SHA256SUMS 2>&1); then pass "$name"
else fail "$name" "$out"; fi
for m in demo draft; do
    logits_case "${TAG}ref/logits of the shipped $m model (f16 file) = NumPy's" "assets/models/$m" \
        f32
done
name="${TAG}ref/perplexity --recall on the shipped demo model = NumPy's"
if ! "$KV" perplexity -m assets/models/demo --recall "$TMP/recall.jsonl" --dtype f32 \
    --cache-dtype f32 >"$TMP/recall.out" 2>&1; then
    fail "$name" "$(tail -1 "$TMP/recall.out")"
elif out=$(cd tests/reference && "$PYTHON" copy_ref.py recall ../../assets/models/demo \
    "$TMP/recall.jsonl" "$TMP/recall.out" 2>&1); then
    pass "$name ($out)"
else fail "$name" "$out"; fi

# The trainer of the models kvchat ships (tests/train/train.py, Debian's python3-torch): its chunked
# LM head equals autograd on the plain expression, and a model it writes (a few steps on this
# README) is the one it trained, read by NumPy, and loads in kvchat with NumPy's logits.
if "$PYTHON" -c "import torch" 2>/dev/null; then
    check "${TAG}ref/train.py's chunked LM head = autograd's loss and gradients" \
        "$PYTHON" tests/train/check_head.py
    check "${TAG}ref/train.py's windows stay inside documents a window long" \
        "$PYTHON" tests/train/check_windows.py
    mkdir -p "$TMP/tc"
    "$KV" tokenize <README.md | "$PYTHON" -c 'import sys, array
array.array("H", map(int, sys.stdin.read().split())).tofile(open(sys.argv[1], "wb"))' \
        "$TMP/tc/train.u16"
    if "$PYTHON" tests/train/train.py "$TMP/tc" "$TMP/trained" --layers 2 --embd 32 --heads 2 \
        --ctx 32 --tokens 512 --batch 4 --threads 1 2>"$TMP/train.err"; then
        logits_case "${TAG}ref/a model train.py wrote (f16) loads with NumPy's logits" \
            "$TMP/trained" f16
        check "${TAG}ref/what train.py wrote is the model it trained (NumPy reads the file)" \
            "$PYTHON" tests/train/check_export.py "$TMP/trained" "$IDS"
    else fail "${TAG}ref/a model train.py wrote (f16) loads with NumPy's logits" \
        "train.py failed: $(tail -c 300 "$TMP/train.err")"; fi
else
    skip "${TAG}ref/train.py" "python3-torch is not installed (make test installs it)"
fi
