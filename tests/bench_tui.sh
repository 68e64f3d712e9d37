#!/usr/bin/env bash
# make bench-tui: decode speed with the TUI open versus chat --no-tui on the same model and prompt
# (from the token events of each run), and the TUI's CPU use while idle.
# usage: tests/bench_tui.sh KVCHAT MODEL_DIR
set -eu
KV=$1 M=$2 N=${N:-200}
TMP=$(mktemp -d)
trap 'tmux -L kvchat-bench kill-server 2>/dev/null; rm -rf "$TMP"' EXIT
rate() { # decode tok/s from an events file, first token excluded (it includes the prefill)
    /usr/bin/python3 -c "import json,sys
t=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"ev\":\"token\"' in l][1:]
print('%.2f' % (len(t) / (sum(t) / 1e3)))" "$1"
}
echo "Hello, tell me a story about caches." | "$KV" chat --no-tui -m "$M" -n "$N" --seed 1 --events "$TMP/plain.jsonl" >/dev/null
T="tmux -L kvchat-bench"
$T new-session -d -s b -x 120 -y 40 "'$KV' -m '$M' -n $N --seed 1 --events '$TMP/tui.jsonl'; sleep 5"
sleep 3
$T send-keys -t b "Hello, tell me a story about caches." Enter
for _ in $(seq 600); do
    [ "$(grep -c '"ev":"turn_end"' "$TMP/tui.jsonl" 2>/dev/null)" -ge 1 ] && break
    sleep 0.5
done
pid=$(pgrep -f -- "-m $M -n $N --seed 1 --events $TMP/tui.jsonl" | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
a=$(ticks)
sleep 5
b=$(ticks)
hz=$(getconf CLK_TCK)
$T send-keys -t b "/quit" Enter
plain=$(rate "$TMP/plain.jsonl")
tui=$(rate "$TMP/tui.jsonl")
echo "decode with chat --no-tui: $plain tok/s"
echo "decode with the TUI open:  $tui tok/s ($(/usr/bin/python3 -c "print('%.1f%%' % (100 * ($tui / $plain - 1)))"))"
echo "TUI CPU while idle: $(/usr/bin/python3 -c "print('%.2f%%' % (100 * ($b - $a) / $hz / 5))") of one core over 5 s"
