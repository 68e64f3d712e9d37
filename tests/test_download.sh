# get-model against a hub on loopback (tests/hub_server.py): the fallback from model.safetensors to
# pytorch_model.bin, shortcuts, resume of a partial file (and of a server that ignores ranges), a
# wrong SHA-256 refused with nothing renamed into place, a server that stops mid-file, HTTP errors
# named. Sourced by run.sh with KV, TAG, TMP, PYTHON.

HUB=$TMP/hub
rm -rf "$HUB"
mkdir -p "$HUB/root/microsoft/DialoGPT-medium" "$HUB/root/owner/st-model"
HUB_PID=
start_hub() { # start_hub [hub_server.py options]: serves $HUB/root, logs to $HUB/log
    stop_hub
    rm -f "$HUB/port"
    : >"$HUB/log"
    "$PYTHON" tests/hub_server.py "$HUB/root" "$HUB/port" "$HUB/log" "$@" &
    HUB_PID=$!
    await "the test hub's port" '[ -s "$HUB/port" ]'
    export HF_ENDPOINT=http://127.0.0.1:$(cat "$HUB/port")
}
stop_hub() { [ -z "$HUB_PID" ] || { kill "$HUB_PID" 2>/dev/null; wait "$HUB_PID" 2>/dev/null; HUB_PID=; }; }

"$KV" make-tiny-model "$HUB/src" --layers 2 --heads 4 --embd 64 --ctx 64 >/dev/null
cp "$HUB/src"/* "$HUB/root/owner/st-model/"
BIN=$HUB/root/microsoft/DialoGPT-medium/pytorch_model.bin
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    skip "${TAG}download/all" "python3-torch is not installed (make test installs it)"
    return 0
fi
"$PYTHON" tests/reference/torch_ckpt.py "$HUB/src" "${BIN%/*}" legacy tied plain prefix
start_hub

out=$("$KV" get-model dialogpt-medium --dir "$HUB/d1" 2>"$HUB/err")
same "${TAG}download/dialogpt-medium: prints the directory" "$HUB/d1" "$out"
same "${TAG}download/no model.safetensors (404): falls back to pytorch_model.bin" \
    "HEAD /microsoft/DialoGPT-medium/resolve/main/model.safetensors -|HEAD /microsoft/DialoGPT-medium/resolve/main/pytorch_model.bin -|GET /cdn/microsoft/DialoGPT-medium/pytorch_model.bin -" \
    "$(grep -E 'safetensors|pytorch_model.bin' "$HUB/log" | grep -v 'GET /microsoft' | paste -sd'|')"
if cmp -s "$HUB/d1/pytorch_model.bin" "$BIN" && [ ! -e "$HUB/d1/model.safetensors" ]; then pass "${TAG}download/the .bin arrives whole"
else fail "${TAG}download/the .bin arrives whole" "$(ls "$HUB/d1" | tr '\n' ' ') $(cat "$HUB/err")"; fi

out=$(XDG_CACHE_HOME=$HUB/cache "$KV" get-model dialogpt-medium 2>"$HUB/err")
same "${TAG}download/a shortcut's default directory" "$HUB/cache/kvchat/models/dialogpt-medium" "$out"
same "${TAG}download/a DialoGPT checkpoint loads, and chats in its template" "template    dialogpt (the model's name says DialoGPT)" \
    "$("$KV" info -m "$out" 2>&1 | grep '^template')"

: >"$HUB/log"
"$KV" get-model owner/st-model --dir "$HUB/d2" >/dev/null 2>"$HUB/err"
if cmp -s "$HUB/d2/model.safetensors" "$HUB/src/model.safetensors" && ! grep -q pytorch_model "$HUB/log"; then
    pass "${TAG}download/model.safetensors when the repository has it"
else fail "${TAG}download/model.safetensors when the repository has it" "$(cat "$HUB/err")"; fi
: >"$HUB/log"
"$KV" get-model owner/st-model --dir "$HUB/d2" >/dev/null 2>&1
same "${TAG}download/complete files are kept, nothing asked" "" "$(cat "$HUB/log")"

# resume: a part file left by an interrupted run is continued from its end
mkdir -p "$HUB/d3"
cp "$HUB/src"/{config.json,vocab.json,merges.txt} "$HUB/d3/"
head -c 3000000 "$HUB/src/model.safetensors" >"$HUB/d3/model.safetensors.part"
: >"$HUB/log"
"$KV" get-model owner/st-model --dir "$HUB/d3" >/dev/null 2>"$HUB/err"
same "${TAG}download/resumes a part file with a range" "GET /cdn/owner/st-model/model.safetensors bytes=3000000-" \
    "$(grep 'GET /cdn' "$HUB/log")"
if cmp -s "$HUB/d3/model.safetensors" "$HUB/src/model.safetensors" && [ ! -e "$HUB/d3/model.safetensors.part" ]; then
    pass "${TAG}download/resumed file = the original"
else fail "${TAG}download/resumed file = the original" "$(cat "$HUB/err")"; fi

# a link planted at PATH.part (to a file bigger than the weights) is refused before anything sizes,
# truncates or writes what it points to
mkdir -p "$HUB/d3l"
cp "$HUB/src"/{config.json,vocab.json,merges.txt} "$HUB/d3l/"
head -c 20000000 /dev/urandom >"$HUB/victim"
victim_sum=$(sha256sum <"$HUB/victim")
ln -s "$HUB/victim" "$HUB/d3l/model.safetensors.part"
expect_error "${TAG}download/a link at PATH.part is refused" 1 \
    "model.safetensors.part: a symbolic link, not followed \(remove it\)" \
    "$KV" get-model owner/st-model --dir "$HUB/d3l"
same "${TAG}download/... and what it points to is untouched" "$victim_sum" "$(sha256sum <"$HUB/victim")"

# a server that ignores the range sends the whole file: the part starts over rather than doubling
start_hub --ignore-range
mkdir -p "$HUB/d4"
cp "$HUB/src"/{config.json,vocab.json,merges.txt} "$HUB/d4/"
head -c 3000000 "$HUB/src/model.safetensors" >"$HUB/d4/model.safetensors.part"
"$KV" get-model owner/st-model --dir "$HUB/d4" >/dev/null 2>"$HUB/err"
if cmp -s "$HUB/d4/model.safetensors" "$HUB/src/model.safetensors"; then pass "${TAG}download/a server that ignores ranges"
else fail "${TAG}download/a server that ignores ranges" "$(cat "$HUB/err")"; fi

# a wrong SHA-256: refused, nothing renamed into place, the bad bytes not kept
start_hub --wrong-sha model.safetensors
expect_error "${TAG}download/wrong SHA-256 refused" 1 \
    "model.safetensors: SHA-256 [0-9a-f]{64} does not match the hub's [0-9a-f]{64}; the download was removed" \
    "$KV" get-model owner/st-model --dir "$HUB/d5"
same "${TAG}download/wrong SHA-256: nothing in place, no part kept" "config.json merges.txt vocab.json" "$(ls "$HUB/d5" | paste -sd' ')"

# a server that stops mid-file: retried from where it stopped, then the part is kept for the next run
start_hub --cut pytorch_model.bin:5000
expect_error "${TAG}download/a server that stops mid-file" 1 \
    "pytorch_model.bin.*; stopped at 0.0 MiB of 12.7 MiB, kept in .*/d6/pytorch_model.bin.part: run the same command to resume" \
    "$KV" get-model dialogpt-medium --dir "$HUB/d6"
same "${TAG}download/each retry resumes where the last stopped" "- bytes=5000- bytes=10000-" \
    "$(grep 'GET /cdn/.*pytorch_model.bin' "$HUB/log" | awk '{print $3}' | paste -sd' ')"
same "${TAG}download/the part holds what arrived" "15000" "$(stat -c %s "$HUB/d6/pytorch_model.bin.part" 2>&1)"
start_hub
"$KV" get-model dialogpt-medium --dir "$HUB/d6" >/dev/null 2>"$HUB/err"
if cmp -s "$HUB/d6/pytorch_model.bin" "$BIN" && grep -q 'GET /cdn/.*pytorch_model.bin bytes=15000-' "$HUB/log"; then
    pass "${TAG}download/the next run resumes and completes"
else fail "${TAG}download/the next run resumes and completes" "$(cat "$HUB/err")"; fi

# errors: named, one line, exit 1 (runtime) or 2 (usage)
expect_error "${TAG}download/no such repository" 1 "owner/nothing/resolve/main/config.json: HTTP 404 \(no such repository or file\)" \
    "$KV" get-model owner/nothing --dir "$HUB/d7"
same "${TAG}download/no such repository: nothing written" "" "$(ls "$HUB/d7")"
mkdir -p "$HUB/root/owner/no-weights" "$HUB/root/owner/no-tokenizer"
cp "$HUB/src"/{config.json,vocab.json,merges.txt} "$HUB/root/owner/no-weights/"
cp "$HUB/src"/{config.json,model.safetensors} "$HUB/root/owner/no-tokenizer/"
"$KV" get-model owner/no-tokenizer --dir "$HUB/d10" >/dev/null 2>"$HUB/err"
same "${TAG}download/a repository without tokenizer files gets GPT-2's, and says so" \
    "kvchat: vocab.json is not in owner/no-tokenizer: using GPT-2's own, which kvchat ships|kvchat: merges.txt is not in owner/no-tokenizer: using GPT-2's own, which kvchat ships|same" \
    "$(paste -sd'|' "$HUB/err")|$(cmp -s "$HUB/d10/vocab.json" assets/vocab.json && cmp -s "$HUB/d10/merges.txt" assets/merges.txt && echo same)"
expect_error "${TAG}download/a repository without weights" 1 \
    "owner/no-weights/resolve/main has neither model.safetensors nor pytorch_model.bin$" "$KV" get-model owner/no-weights --dir "$HUB/d9"
port=${HF_ENDPOINT##*:}
stop_hub
expect_error "${TAG}download/nothing listening" 1 "could not connect \(no network, or a firewall\?\)" \
    env HF_ENDPOINT="http://127.0.0.1:$port" "$KV" get-model gpt2 --dir "$HUB/d8"
expect_error "${TAG}download/HF_ENDPOINT not http" 2 "HF_ENDPOINT 'ftp://x' is not an http:// or https:// address" \
    env HF_ENDPOINT=ftp://x "$KV" get-model gpt2 --dir "$HUB/d8"
expect_error "${TAG}download/unknown shortcut" 2 "unknown model 'dialogpt-huge'" "$KV" get-model dialogpt-huge
expect_error "${TAG}download/bad repository name" 2 "'a/../b' is not a Hugging Face repository name" "$KV" get-model a/../b
unset HF_ENDPOINT

# --- hostile servers: nothing but the file is kept, and nothing waits for ever ---
mkdir -p "$HUB/root/owner/tiny"
cp "$HUB/src"/* "$HUB/root/owner/tiny/"
small_ok() { cp "$HUB/src"/{config.json,vocab.json,merges.txt} "$1/"; }
# an endless config.json: stopped at its cap, nothing kept
start_hub --endless config.json
expect_error "${TAG}download/an endless config.json is stopped at its cap" 1 \
    "config.json: the server sent more than the file can be" \
    "$KV" get-model owner/tiny --dir "$HUB/e1"
same "${TAG}download/an endless config.json leaves nothing" "" "$(ls "$HUB/e1")"
# weights announced as 1,000 bytes: stopped past them, the part removed
start_hub --announce model.safetensors:1000
mkdir -p "$HUB/e2" && small_ok "$HUB/e2"
expect_error "${TAG}download/weights longer than announced are stopped" 1 \
    "model.safetensors: the reply is longer than the file can be" \
    "$KV" get-model owner/tiny --dir "$HUB/e2"
same "${TAG}download/weights longer than announced leave no part" \
    "config.json merges.txt vocab.json" \
    "$(ls "$HUB/e2" | paste -sd' ')"
# announced larger than the disk: refused before any byte is fetched
start_hub --announce model.safetensors:9000000000000000000
mkdir -p "$HUB/e3" && small_ok "$HUB/e3"
expect_error "${TAG}download/no room on the disk: refused first" 1 \
    "model.safetensors: not enough free space: it needs .* more, and .* are free there" \
    "$KV" get-model owner/tiny --dir "$HUB/e3"
same "${TAG}download/no room: nothing fetched" "" "$(grep 'GET /cdn' "$HUB/log")"
# a mirror that says no size and sends without end: stopped before the disk fills (a 320 MiB
# tmpfs, so that the 256 MiB reserve is reached after some 60 MiB; skipped where mounting is not
# allowed)
mkdir -p "$HUB/e5"
if mount -t tmpfs -o size=320m kvchat-test "$HUB/e5" 2>/dev/null; then
    start_hub --no-size model.safetensors --endless model.safetensors
    small_ok "$HUB/e5"
    expect_error "${TAG}download/endless weights of no size stop before the disk fills" 1 \
        "model.safetensors: stopped with less than 256 MiB left on the disk" \
        "$KV" get-model owner/tiny --dir "$HUB/e5"
    same "${TAG}download/endless weights leave no part" "config.json merges.txt vocab.json" \
        "$(ls "$HUB/e5" | paste -sd' ')"
    umount "$HUB/e5"
else
    skip "${TAG}download/endless weights of no size stop before the disk fills" "cannot mount a tmpfs"
fi
# a captive portal's page, for a small file and for the weights: never saved as the model
for f in config.json model.safetensors; do
    start_hub --html $f
    mkdir -p "$HUB/e4-$f" && [ $f = config.json ] || small_ok "$HUB/e4-$f"
    expect_error "${TAG}download/an HTML page as $f is refused" 1 \
        "$f: the server sent an HTML page \(a captive portal" \
        "$KV" get-model owner/tiny --dir "$HUB/e4-$f"
    check "${TAG}download/an HTML page as $f is not kept" \
        test ! -e "$HUB/e4-$f/$f" -a ! -e "$HUB/e4-$f/$f.part"
done
# content checked before the rename: a config.json that is not one, merges that do not parse
mkdir -p "$HUB/root/owner/bad-config" "$HUB/root/owner/bad-merges"
cp "$HUB/src"/* "$HUB/root/owner/bad-config/"
cp "$HUB/src"/* "$HUB/root/owner/bad-merges/"
echo '{"n_layer": "many"' >"$HUB/root/owner/bad-config/config.json"
printf '#version: 0.2\nonly-one-token-on-this-line\n' >"$HUB/root/owner/bad-merges/merges.txt"
start_hub
expect_error "${TAG}download/a config.json that does not parse is refused" 1 \
    "config.json: .*; the download was removed" "$KV" get-model owner/bad-config --dir "$HUB/e5"
expect_error "${TAG}download/merges that do not parse are refused" 1 \
    "merges.txt: .*; the download was removed" "$KV" get-model owner/bad-merges --dir "$HUB/e6"
check "${TAG}download/refused merges are not in place" test ! -e "$HUB/e6/merges.txt"
# a page an older kvchat saved as config.json is fetched again, not kept
mkdir -p "$HUB/e7"
echo "<html>portal</html>" >"$HUB/e7/config.json"
"$KV" get-model owner/tiny --dir "$HUB/e7" >/dev/null 2>"$HUB/err"
check "${TAG}download/a stored page is fetched again" \
    cmp "$HUB/e7/config.json" "$HUB/src/config.json"
check "${TAG}download/... saying so" grep -q "config.json is not usable" "$HUB/err"
# headers trickled at 2 bytes/s: given up within the time limit (here 3 s), named
for f in config.json model.safetensors; do
    start_hub --trickle $f
    mkdir -p "$HUB/e8-$f" && [ $f = config.json ] || small_ok "$HUB/e8-$f"
    t0=$SECONDS
    expect_error "${TAG}download/trickled headers of $f are given up on" 1 \
        "$f: given up: no data within the time limit for headers" \
        env KVCHAT_HTTP_TIMEOUT=3 "$KV" get-model owner/tiny --dir "$HUB/e8-$f"
    check "${TAG}download/... within the limit, not retried" test $((SECONDS - t0)) -lt 15
done
stop_hub
expect_error "${TAG}download/an HF_TOKEN with a line break is refused" 1 \
    "HF_TOKEN holds a line break" \
    env HF_TOKEN=$'abc\r\nX-Injected: 1' "$KV" get-model owner/tiny --dir "$HUB/e9"
unset HF_ENDPOINT
# offline (nothing listens): a clear error, and no empty folder left to look like a model
expect_error "${TAG}download/offline: a clear error" 1 "could not connect" \
    env HF_ENDPOINT=http://127.0.0.1:9 "$KV" get-model owner/tiny --dir "$HUB/offline"
check "${TAG}download/offline: no empty model folder is left" test ! -e "$HUB/offline"
