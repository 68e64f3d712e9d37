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
    for _ in $(seq 100); do [ -s "$HUB/port" ] && break; sleep 0.1; done
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
