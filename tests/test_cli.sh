# The command-line contract: help, generate, tokenize, info, get-model offline, determinism.
# Sourced by run.sh with KV (the binary), TAG, TMP and PYTHON set.

M=$TMP/cli-model
"$KV" make-tiny-model "$M" --layers 2 --heads 2 --embd 64 --ctx 48 --seed 5 >/dev/null

for cmd in generate tokenize info bench perplexity get-model convert make-tiny-model; do
    check "${TAG}cli/$cmd --help" "$KV" "$cmd" --help
done
check "${TAG}cli/--help lists commands" bash -c "'$KV' --help | grep -q 'make-tiny-model'"

gen() { "$KV" generate -m "$M" --dtype f32 -q "$@"; }
ids=$(gen -p "Hello world" -n 12 --temp 0 --output ids)
same "${TAG}cli/generate -n counts tokens" 12 "$(echo "$ids" | wc -w)"
text=$(gen -p "Hello world" -n 12 --temp 0)
decoded=$("$KV" tokenize -m "$M" --decode "$ids")
same "${TAG}cli/streamed text equals decoding its ids" "$decoded" "$text"
same "${TAG}cli/greedy is deterministic" "$ids" "$(gen -p "Hello world" -n 12 --temp 0 --output ids)"
s1=$(gen -p "Hi" -n 16 --temp 1.5 --top-k 0 --top-p 1 --seed 11 --output ids)
s2=$(gen -p "Hi" -n 16 --temp 1.5 --top-k 0 --top-p 1 --seed 11 --output ids)
s3=$(gen -p "Hi" -n 16 --temp 1.5 --top-k 0 --top-p 1 --seed 12 --output ids)
same "${TAG}cli/same seed, same tokens" "$s1" "$s2"
if [ "$s1" != "$s3" ]; then pass "${TAG}cli/other seed, other tokens"; else fail "${TAG}cli/other seed, other tokens" "identical"; fi
same "${TAG}cli/prompt text equals prompt ids" "$ids" \
    "$(gen --prompt-ids "$("$KV" tokenize -m "$M" "Hello world" | tr ' ' ,)" -n 12 --temp 0 --output ids)"

# the context (48) fills: generation stops there and says so on stderr
out=$("$KV" generate -m "$M" --dtype f32 --prompt-ids "$(seq -s, 100 139)" -n 30 --temp 0 --output ids 2>"$TMP/ctx.err")
same "${TAG}cli/stops when the context is full" 8 "$(echo "$out" | wc -w)"
check "${TAG}cli/says the context is full" grep -q "context of 48 tokens is full" "$TMP/ctx.err"
same "${TAG}cli/with a draft, stops where plain decoding does" "$out" \
    "$("$KV" generate -m "$M" --dtype f32 --prompt-ids "$(seq -s, 100 139)" -n 30 --temp 0 \
        --output ids --draft self-q8 --draft-max 15 2>/dev/null)"

# tokenize: stdin equals argument; known ids
same "${TAG}cli/tokenize known ids" "15496 995" "$("$KV" tokenize -m "$M" "Hello world")"
same "${TAG}cli/tokenize stdin" "$("$KV" tokenize -m "$M" "$(printf 'a\tb  c')")" "$(printf 'a\tb  c' | "$KV" tokenize -m "$M")"
same "${TAG}cli/tokenize needs no model: GPT-2's tokenizer ships" "15496 995|Hello world" \
    "$(env -u KVCHAT_MODEL HOME="$TMP/nohome" XDG_CACHE_HOME= "$KV" tokenize "Hello world")|$(env -u KVCHAT_MODEL HOME="$TMP/nohome" "$KV" tokenize --decode "15496 995")"
same "${TAG}cli/tokenize --special" "50256 15496" "$("$KV" tokenize -m "$M" --special "<|endoftext|>Hello")"

# info: KV bytes from 2 x n_layer x n_embd x bytes (2 x 2 x 64 x 4 = 1 KiB per token, 48 KiB at 48)
info=$("$KV" info -m "$M")
check "${TAG}cli/info parameter count" grep -q "parameters  $((50257 * 64 + 48 * 64 + 2 * 64 + 2 * (4 * 64 + 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64)))" <<<"$info"
check "${TAG}cli/info kv table" grep -qE "f32 +1.0 KiB +48.0 KiB" <<<"$info"
# q4 rows: 2 layers x K, V x 2 heads x (16 bytes of values + an f16 scale) = 144 bytes a position
check "${TAG}cli/info kv table counts q4 with its scales" grep -qE "q4 +144 B +6.8 KiB" <<<"$info"

# get-model offline: one clear line, nothing left that looks complete
expect_error "${TAG}cli/get-model offline" 1 "downloading https://huggingface.co/.*(resolve|connect|network)" \
    "$KV" get-model gpt2 --dir "$TMP/dl"
same "${TAG}cli/get-model leaves no partial file" "" "$(ls "$TMP/dl")"

# --no-cache gives the same greedy tokens (the full comparison is in test_reference.sh)
same "${TAG}cli/--no-cache same tokens" "$ids" "$(gen -p "Hello world" -n 12 --temp 0 --output ids --no-cache)"
# the default thread count is the cores this process may run on (one under taskset -c 0), not the machine's
if command -v taskset >/dev/null 2>&1; then
    check "${TAG}cli/threads default to the process's cores" sh -c \
        "taskset -c 0 '$KV' bench -m '$M' --device cpu --dtype f32 --runs 1 --prefill 4 --context 0 2>/dev/null | grep -q ', 1 threads,'"
fi
# the CPU has one kernel set: --gpu-kernels is accepted and changes nothing there
same "${TAG}cli/--gpu-kernels basic on the CPU" "$ids" "$(gen -p "Hello world" -n 12 --temp 0 --output ids --gpu-kernels basic)"
# --dump-logits writes vocab-size float32
gen -p "Hello" -n 1 --temp 0 --dump-logits "$TMP/l.bin" >/dev/null
same "${TAG}cli/--dump-logits size" $((50257 * 4)) "$(stat -c %s "$TMP/l.bin")"

# devices: with a CUDA build and no GPU, auto says it runs on the CPU and cuda is a clear error
cuda_build=0
"$KV" --version | grep -q '^devices: .*cuda' && cuda_build=1
if [ $cuda_build = 1 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    KVCHAT_DEVICE= "$KV" generate -m "$M" --dtype f32 -p hi -n 2 -q >/dev/null 2>"$TMP/auto.err"
    same "${TAG}cli/--device auto without a GPU runs" 0 $?
    same "${TAG}cli/... and does not say so on every command" "" "$(cat "$TMP/auto.err")"
    KVCHAT_DEVICE= "$KV" generate -m "$M" --dtype f32 -p hi -n 2 -v >/dev/null 2>"$TMP/auto.err"
    same "${TAG}cli/-v says it fell back, once" 1 "$(grep -c "no usable GPU.*running on the CPU" "$TMP/auto.err")"
    KVCHAT_DEVICE= "$KV" info -m "$M" >"$TMP/auto.out" 2>"$TMP/auto.err"
    same "${TAG}cli/info says why it runs on the CPU, on stdout" "1 0" \
        "$(grep -c '^device  *cpu (no usable GPU: ' "$TMP/auto.out") $(wc -c <"$TMP/auto.err")"
    expect_error "${TAG}cli/--device cuda without a GPU" 1 "--device cuda: no usable GPU" \
        "$KV" generate -m "$M" --device cuda -p hi -n 2
elif [ $cuda_build = 0 ]; then
    expect_error "${TAG}cli/--device cuda in a CPU build" 1 "this build has no CUDA backend" "$KV" generate -m "$M" --device cuda -p hi
fi
# the GPU self-test with no GPU in use: it says so and succeeds (the CPU is the reference); --device
# cuda where there is none is the usual one-line error
if ! nvidia-smi -L >/dev/null 2>&1; then
    same "${TAG}cli/selftest without a GPU says so" "no GPU in use: nothing to self-test" \
        "$("$KV" selftest -m "$M" 2>/dev/null | cut -d'(' -f1 | sed 's/ *$//')"
    expect_error "${TAG}cli/selftest --device cuda without a GPU" 1 "--device cuda: (no usable GPU|this build has no CUDA)" \
        "$KV" selftest -m "$M" --device cuda
fi
expect_error "${TAG}cli/selftest bad flag" 2 "unknown option '--frob'" "$KV" selftest -m "$M" --frob
# selftest --cases (the GPU check's engine): each part of a case named when wrong; on the CPU it
# refuses, as there is nothing to compare
for c in "f32/paged/f32|is not WEIGHTS/LAYOUT/CACHE/KERNELS" "int8/paged/f32/fast|weights are" \
    "f32/paged/q8/fast|a cache is" "f32/rows/f32/fast|the layout is paged or contiguous" \
    "f32/paged/f32/slow|the kernels are fast or basic, not 'slow'" ",|no case given"; do
    expect_error "${TAG}cli/selftest --cases ${c%%|*} is refused" 2 "--cases: .*${c#*|}" \
        "$KV" selftest -m "$M" --cases "${c%%|*}"
done
expect_error "${TAG}cli/selftest --cases longer than the context" 1 "need more than the model's" \
    "$KV" selftest -m "$M" --cases f32/paged/f32/fast --prompt 4000
expect_error "${TAG}cli/selftest --cases on the CPU" 1 "--cases: no GPU in use \(--device cpu\)" \
    "$KV" selftest -m "$M" --cases f32/paged/f32/fast --prompt 8 --force 2 --device cpu

# teacher forcing: --force-ids feeds given ids one per step and --dump-logits writes a row per step;
# each row equals recomputing its whole prefix without the cache
IDS=464,3290,373,1043,287,257
"$KV" generate -m "$M" --dtype f32 --prompt-ids $IDS --force-ids 13,11,50256,198 --dump-logits "$TMP/tf.bin" -q --output ids >"$TMP/tf.ids"
"$KV" generate -m "$M" --dtype f32 --prompt-ids $IDS --force-ids 13,11,50256,198 --dump-logits "$TMP/tf-nc.bin" -q --no-cache >/dev/null
same "${TAG}cli/--force-ids prints the forced ids" "13 11 50256 198" "$(cat "$TMP/tf.ids")"
check "${TAG}cli/--force-ids dumps one row per step, each equal to a fresh pass" "$PYTHON" -c "
import numpy as n
a = n.fromfile('$TMP/tf.bin', '<f4').reshape(-1, 50257); b = n.fromfile('$TMP/tf-nc.bin', '<f4').reshape(-1, 50257)
assert a.shape == (5, 50257) and b.shape == a.shape, (a.shape, b.shape)
e = max(n.linalg.norm(x - y) / n.linalg.norm(y) for x, y in zip(a, b))
assert e < 1e-5 and len({r.tobytes() for r in a}) == 5, e"
expect_error "${TAG}cli/--force-ids out of the vocabulary" 1 "--force-ids: token id 60000 is outside the vocabulary" \
    "$KV" generate -m "$M" --prompt-ids 1 --force-ids 60000
# speculative decoding: greedy, the same ids with every drafter; the summary line counts the drafts;
# bad drafters and settings are one-line errors
greedy() { "$KV" generate -m "$M" --dtype f32 --prompt-ids $IDS,$IDS -n 24 --temp 0 --output ids "$@"; }
want=$(greedy -q)
for d in lookup self-q8 "$M"; do
    same "${TAG}cli/generate --draft ${d##*/}: greedy gives plain decoding's ids" "$want" \
        "$(greedy -q --draft "$d" --draft-max 3)"
done
# q4 weights: each verify pass's rows (up to 8 a pass, 16 drafted split in two) are decode steps'
want=$("$KV" generate -m "$M" --dtype q4 --prompt-ids $IDS,$IDS -n 24 --temp 0 --output ids -q)
for d in lookup self-q8; do
    same "${TAG}cli/q4 weights, --draft $d: greedy gives plain decoding's ids" "$want" \
        "$("$KV" generate -m "$M" --dtype q4 --prompt-ids $IDS,$IDS -n 24 --temp 0 --output ids -q \
            --draft $d --draft-max 15)"
done
greedy --draft lookup >/dev/null 2>"$TMP/draft.err"
n='[0-9]+'
check "${TAG}cli/generate --draft says what the drafts did" grep -qE "^\[draft lookup: $n drafted, \
$n accepted \($n%; $n% of $n tested\), [0-9.]+ tokens a model pass over $n passes\]\$" \
    "$TMP/draft.err"
"$KV" bench --speculative -m "$M" --runs 1 -n 16 --draft "lookup,self-q8,$M" \
    --json "$TMP/spec.json" >"$TMP/spec.out" 2>&1
check "${TAG}cli/bench --speculative: each drafter, the same greedy reply, figures in range" \
    "$PYTHON" -c "
import json
d = json.load(open('$TMP/spec.json'))
rows = d['drafters']
assert [r['drafter'] for r in rows] == ['lookup', 'self-q8', '$M'], rows
for r in rows:
    assert r['same_reply'] and 0 <= r['acceptance_tested'] <= 1 and r['tokens_per_pass'] >= 1, r
    assert 0 <= r['acceptance'] <= r['acceptance_tested'] and r['verify_pass_cost'] > 0, r
assert d['tokens'] == 16 and d['decode_step_ms'] > 0, d"
same "${TAG}cli/bench --speculative: its table fits 80 columns" "" \
    "$(grep -A8 '^drafter ' "$TMP/spec.out" | awk 'length > 80')"
printf '{"turns": ["Hello there.", "Hello to you."]}\n{"turns": ["%s", "Yes."]}\n' \
    "Again and again and again and again" >"$TMP/spec-chats.jsonl"
"$KV" bench --speculative -m "$M" --runs 2 -n 12 --draft lookup --chats "$TMP/spec-chats.jsonl" \
    --json "$TMP/spec-chats.json" >"$TMP/spec.out" 2>&1
check "${TAG}cli/bench --speculative --chats: a prompt a chat, runs alternating, intervals" \
    "$PYTHON" -c "
import json
d = json.load(open('$TMP/spec-chats.json'))
r = d['drafters'][0]
assert d['prompts'] == 2 and d['runs'] == 2 and d['tokens'] == 12, d
lo, hi = r['acceptance_95']
assert 0 <= lo <= r['acceptance'] <= hi <= 1 and r['same_reply'], r
lo, hi = r['speedup_range']
assert 0 < lo <= r['speedup'] <= hi, r"
mkdir -p "$TMP/bogus-draft" "$TMP/missing-draft" # folders without a checkpoint (a name that is no
# folder is refused as a typo: test_bad_input.sh)
expect_error "${TAG}cli/bench --speculative with a drafter that does not load: at once" 1 \
    "draft model .*/bogus-draft" "$KV" bench --speculative -m "$M" -n 8 --draft "lookup,$TMP/bogus-draft"
same "${TAG}cli/bench --speculative with a bad drafter measures nothing first" "" \
    "$(grep "decode step" "$TMP/out")"
expect_error "${TAG}cli/bench --draft without --speculative" 2 "only with --speculative" \
    "$KV" bench -m "$M" --draft lookup
expect_error "${TAG}cli/--draft that does not load" 1 "draft model $TMP/missing-draft" \
    "$KV" generate -m "$M" -p hi --draft "$TMP/missing-draft"
expect_error "${TAG}cli/--draft-max out of range" 2 "--draft-max" \
    "$KV" generate -m "$M" -p hi --draft lookup --draft-max 16
expect_error "${TAG}cli/--draft with --force-ids" 2 "--draft: not with --force-ids" \
    "$KV" generate -m "$M" --prompt-ids 1 --force-ids 2 --draft lookup
expect_error "${TAG}cli/--draft with no value" 2 "--draft needs a value" \
    "$KV" generate -m "$M" --draft
# the README's table of chat commands is the table the chat runs (app/actions.c)
check "${TAG}cli/README's commands table is chat --commands" "$PYTHON" - "$KV" <<'PY'
import subprocess, sys
table = subprocess.run([sys.argv[1], "chat", "--commands"], capture_output=True, text=True,
                       check=True).stdout
assert table.startswith("| commands | |\n") and table.count("\n") >= 16, table
assert table in open("README.md").read(), "README.md's commands table differs from chat --commands"
PY
# the events table of model/README.md is the schema the program checks events against
check "${TAG}cli/model/README's events table is replay --events-table" "$PYTHON" - "$KV" <<'PY'
import subprocess, sys
table = subprocess.run([sys.argv[1], "replay", "--events-table"], capture_output=True, text=True,
                       check=True).stdout
assert table.startswith("| ev | what |") and table.count("\n") >= 25, table
assert "| `turn_end` |" in table and "`window`: the window's token ids" in table, table
assert table in open("model/README.md").read(), "model/README.md's events table differs"
PY
# the man page names every subcommand, option and chat command kvchat's own help lists
check "${TAG}cli/the man page covers every --help" "$PYTHON" - "$KV" <<'PY'
import re, subprocess, sys
kv = sys.argv[1]
man = open("assets/kvchat.1").read().replace("\\-", "-")
run = lambda *a: subprocess.run([kv, *a], capture_output=True, text=True).stdout
top = run("--help")
cmds = re.findall(r"^  ([a-z][a-z-]+)  ", top, re.M)
assert len(cmds) >= 11, cmds
missing = [c for c in cmds if not re.search(r'^\.BI? "?%s\b' % re.escape(c), man, re.M)]
for c in [""] + cmds:
    text = run(*([c] if c else []), "--help")
    for o in sorted(set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", text))):
        if o != "--help" and o not in man:
            missing.append(f"{c or 'kvchat'} {o}")
for l in run("chat", "--commands").splitlines()[2:]:
    name = l.split("`")[1].split()[0]
    if name not in man:
        missing.append(name)
assert not missing, missing
PY
if command -v groff >/dev/null; then
    check "${TAG}cli/the man page renders without a warning" \
        bash -c "[ -z \"\$(groff -man -ww -z assets/kvchat.1 2>&1)\" ]"
fi
# make install: the binary, the tokenizer it ships and the man page under PREFIX, found from there
P=$TMP/prefix
make -s --no-print-directory install PREFIX="$P" BUILD="$(dirname "$KV")" >/dev/null 2>&1
check "${TAG}cli/make install puts the binary, tokenizer and man page under PREFIX" \
    test -x "$P/bin/kvchat" -a -s "$P/share/kvchat/vocab.json" -a -s "$P/share/kvchat/merges.txt" \
    -a -s "$P/share/man/man1/kvchat.1"
same "${TAG}cli/the installed kvchat finds its own tokenizer" "assets: $P/share/kvchat" \
    "$(env -u KVCHAT_ASSETS "$P/bin/kvchat" --version | sed -n 2p)"
same "${TAG}cli/... and tokenizes with it" "15496 995" \
    "$(env -u KVCHAT_ASSETS "$P/bin/kvchat" tokenize "Hello world")"
make -s --no-print-directory uninstall PREFIX="$P" >/dev/null 2>&1
check "${TAG}cli/make uninstall removes them" \
    bash -c "[ -z \"\$(find '$P' -type f)\" ] && [ ! -d '$P/share/kvchat' ]"

# each subcommand's usage line offers the weight dtypes its --dtype option lists (q8, q4 too)
for c in generate chat info selftest perplexity bench replay convert; do
    h=$("$KV" $c --help 2>&1)
    u=$(sed -n '1,3p' <<<"$h" | grep -o -- '--dtype [a-z0-9|]*' | head -1)
    if [ -n "$u" ] && grep -q -- '--dtype T  *weights in f32 | bf16 | f16 | q8' <<<"$h"; then
        same "${TAG}cli/$c --help: the usage line's dtypes are the option's" "--dtype f32|bf16|f16|q8|q4" "$u"
    fi
done
# bench --help: every option its prose names is in its list of options
check "${TAG}cli/bench --help lists every option its text names" "$PYTHON" - "$KV" <<'PY'
import re, subprocess, sys
h = subprocess.run([sys.argv[1], "bench", "--help"], capture_output=True, text=True).stdout
lines = h.splitlines()
first = next(i for i, l in enumerate(lines) if re.match(r"^      --turns ", l))  # the list
text = re.sub(r"On a random 124M-shaped model.*?kvchat bench -m \S+", "", "\n".join(lines[:first]),
              flags=re.S)  # make-tiny-model's options, in the example
text = text.replace("perplexity --repeat", "")  # another command's
prose = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
listed = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", "\n".join(lines[first:])))
missing = sorted(prose - listed)
assert not missing, missing
PY

# perplexity's progress line on a 50-column terminal (script(1) keeps every draw): drawn first at 0
# tokens, before any window is scored; each draw clears the line and fits in 49 columns, so none
# wraps (a wrapped one left its first part behind at every redraw)
if command -v script >/dev/null; then
    "$PYTHON" -c "
import random; random.seed(1); w='the of and to a in is was he for it with as his on be at by'.split()
print(' '.join(random.choice(w) for _ in range(700)))" >"$TMP/ppl-text.txt"
    kv=$(readlink -f "$KV")
    script -qec "stty cols 50; '$kv' perplexity -m '$M' --ctx 48 '$TMP/ppl-text.txt'" /dev/null \
        >"$TMP/ppl.raw" 2>&1
    check "${TAG}cli/perplexity's progress: first at 0 tokens, each draw one cleared line of <= 49 columns" \
        "$PYTHON" - "$TMP/ppl.raw" <<'PY'
import sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
draws = [d.split("\n")[0].rstrip("\r") for d in raw.split("\r\x1b[K") if d.startswith("perplexity [")]
assert len(draws) >= 2 and "] 0/" in draws[0], draws[:2]
assert max(len(d) for d in draws) <= 49, max(draws, key=len)
PY
fi

# make builds CUDA for the GPUs present (with none, the oldest architecture's PTX alone: one
# compile, not seven), and for every architecture where the build travels or stays (CUDA_ALL=1:
# make install, CI)
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    codes() {
        make -n -s CUDA=1 CI= BUILD="$TMP/mk" "$@" 2>/dev/null | grep -o 'code=[a-z_0-9]*' |
            sort -u | tr '\n' ' '
    }
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
    here=$(codes "$TMP/mk/obj/kernels/cuda/matvec.o")
    if [ -n "$cc" ]; then
        same "${TAG}cli/make: CUDA for the GPU present" 1 "$(grep -c "code=sm_$cc " <<<"$here")"
    else
        same "${TAG}cli/make: no GPU here: one architecture's PTX" "code=compute_80 " "$here"
    fi
    all=$(codes install)
    same "${TAG}cli/make install: CUDA for every architecture" "yes" \
        "$(grep -q 'code=sm_80 .*code=sm_86 .*code=sm_89 .*code=sm_90 ' <<<"$all" && echo yes)"
fi
