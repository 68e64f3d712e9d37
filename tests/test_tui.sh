# The full-screen chat driven through tmux: start, send, watch the reply stream and the panel's
# numbers, resize to 80x24 and back, Ctrl-C mid-reply then chat again, switch conversations, /quit
# exits 0. Sourced by run.sh with KV, TAG, TMP.

if ! command -v tmux >/dev/null; then
    skip "${TAG}tui/all" "tmux is not installed"
    return 0 2>/dev/null || exit 0
fi
TM="tmux -L kvchat-test-$$"
TUIM=$TMP/tui-model
"$KV" make-tiny-model "$TUIM" --layers 4 --heads 4 --embd 256 --ctx 256 --seed 4 >/dev/null
stop_tmux() { $TM kill-server 2>/dev/null; sleep 0.5; }
screen_text() { $TM capture-pane -t tui -p 2>/dev/null; }
wait_for() { # wait_for PATTERN [SECONDS]: polls the screen, for at least $WAIT_MAX s (lib.sh's)
    local limit=${2:-15}
    [ "$limit" -ge "${WAIT_MAX:-180}" ] || limit=${WAIT_MAX:-180}
    local deadline=$((SECONDS + limit))
    while [ $SECONDS -lt $deadline ]; do
        screen_text | grep -qE -- "$1" && return 0
        sleep 0.2
    done
    return 1
}
expect_screen() { # expect_screen NAME PATTERN [SECONDS]
    if wait_for "$2" "${3:-15}"; then pass "$1"; else fail "$1" "no /$2/ on screen: $(screen_text | tr -s ' \n' ' ' | head -c 400)"; fi
}

stop_tmux
rm -f "$TMP/tui.rc"
$TM new-session -d -s tui -x 120 -y 40 \
    "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --dtype f32 -n 12 --ctx 256 --events '$TMP/tui.jsonl' --session '$TMP/tui.session'; echo \$? > '$TMP/tui.rc'; sleep 3600"
expect_screen "${TAG}tui/starts with the panel and the random-weights label" "KV cache.*conv 1" 20
expect_screen "${TAG}tui/says where the session is saved" "saving this session to .*tui.session"
expect_screen "${TAG}tui/labels random weights" "RANDOM WEIGHTS"
$TM send-keys -t tui "Hello there" Enter
expect_screen "${TAG}tui/shows the message" "you +Hello there"
expect_screen "${TAG}tui/streams the reply" "gpt-2 +[^ ]"
expect_screen "${TAG}tui/panel counts tokens" "[0-9]+ / 256 tok"
expect_screen "${TAG}tui/panel shows decode speed" "decode [0-9.]+ tok/s" 30
expect_screen "${TAG}tui/each reply is followed by its statistics" "prompt [0-9]+ tok in .* · reply [0-9]+ tok" 30
idle() { wait_for "Ctrl-C twice: quit" 60; }
idle
# Ctrl-C while a long reply is being generated: it stops, the app keeps running
$TM send-keys -t tui "/set n 100000" Enter
$TM send-keys -t tui "Tell me more" Enter
wait_for "generating" 30
expect_screen "${TAG}tui/the status bar shows the reply's speed live" "generating [0-9.]+ tok/s" 30
# a command that would change a conversation meanwhile: the engine's refusal, nothing changes
$TM send-keys -t tui "/pin" Enter
expect_screen "${TAG}tui//pin during a reply is refused by the engine" "/pin: a reply is being generated"
$TM send-keys -t tui C-c
expect_screen "${TAG}tui/Ctrl-C stops the reply" "stopped: the reply so far stays"
idle
$TM send-keys -t tui "/set n 12" Enter
$TM resize-window -t tui -x 80 -y 24
expect_screen "${TAG}tui/resized to 80x24" "KV cache"
# narrow: the panel is stacked under the chat (its box starts at column 0), the status line is last
expect_screen "${TAG}tui/80x24 stacks the panel under the chat" "^┌─ KV cache"
expect_screen "${TAG}tui/80x24 keeps the status line" "^ (.*[^ ] +)?(conv 1/1|stopped: )"
expect_screen "${TAG}tui/80x24: the status line keeps its keys" "F1 help  Ctrl-C twice: quit *$"
expect_screen "${TAG}tui/80x24: the map keeps a legend" "cell=[0-9]+tok u:you|read: <2% <10%"
$TM send-keys -t tui F1
expect_screen "${TAG}tui/80x24: F1 shows every command" "/save \[FILE\]  /help  /quit"
expect_screen "${TAG}tui/80x24: F1 says what each colour means, whole" "red evictions  yellow notes  │"
expect_screen "${TAG}tui/80x24: F1 says how it closes" "any key closes this help"
expect_screen "${TAG}tui/80x24: F1 leaves the input and status lines in view" \
    "F1 help  Ctrl-C twice: quit *$"
$TM send-keys -t tui x
expect_screen "${TAG}tui/80x24: the key that closes F1 is typed, not lost" "^> x *$"
$TM send-keys -t tui C-c
$TM send-keys -t tui F5
expect_screen "${TAG}tui/80x24: F5 says what it did, and where the log is" \
    "panel log: evictions only \(no room for it here"
$TM send-keys -t tui F5 F5
$TM resize-window -t tui -x 120 -y 40
expect_screen "${TAG}tui/resized back" "KV cache"
expect_screen "${TAG}tui/120 columns: the status line has htop's bar of F-keys" \
    "F1 help  F2 panel  F5 log  F6 convs  Ctrl-C twice: quit"
$TM send-keys -t tui "and again" Enter
expect_screen "${TAG}tui/chats again after Ctrl-C" "you +and again" 30
idle
$TM send-keys -t tui "/new" Enter
expect_screen "${TAG}tui//new opens conversation 2" "conv 2/2"
$TM send-keys -t tui Escape "[1;5D"
expect_screen "${TAG}tui/Ctrl-Left switches back" "conv 1/2"
$TM send-keys -t tui "/fork" Enter
expect_screen "${TAG}tui//fork names parent and child" "forked conversation 1 into 3"
expect_screen "${TAG}tui//fork: the child's panel is its parent's" "[0-9]+ / 256 tok +cap [1-9]"
$TM send-keys -t tui "/conv 1" Enter
expect_screen "${TAG}tui//conv 1 after the fork" "conv 1/3"
if screen_text | grep -q "forked conversation"; then fail "${TAG}tui/a switch clears what was said of the other conversation" "still on screen"
else pass "${TAG}tui/a switch clears what was said of the other conversation"; fi
$TM send-keys -t tui "/frobnicate" Enter
expect_screen "${TAG}tui/unknown command is a message" "unknown command /frobnicate"
$TM send-keys -t tui "/show" Enter
expect_screen "${TAG}tui//show says the template and why" "template: gpt2 \(the default for GPT-2 models\)"
expect_screen "${TAG}tui//show says where the session is saved" "session: .*tui.session"
$TM send-keys -t tui "/retry" Enter
expect_screen "${TAG}tui//retry right after /show: command output is not a message" "truncate [0-9]+->[0-9]+ tok"
idle
if screen_text | grep -q "/retry: "; then fail "${TAG}tui//retry after /show is not refused" "$(screen_text | grep '/retry: ')"
else pass "${TAG}tui//retry after /show is not refused"; fi
$TM send-keys -t tui "/set temp abc" Enter
expect_screen "${TAG}tui/bad /set value is a message" "temp: expected a number"
$TM send-keys -t tui "/set top-k 10" Enter
expect_screen "${TAG}tui//set top-k, as the status bar spells it" "top-k = 10"
$TM send-keys -t tui "/set top_p 0.9" Enter
expect_screen "${TAG}tui//set top_p, as the session spells it" "top-p = 0.9"
$TM send-keys -t tui "/pin" Enter
expect_screen "${TAG}tui//pin with no number: your last message" "your last message pinned: eviction skips it"
$TM send-keys -t tui "/unpin" Enter
expect_screen "${TAG}tui//unpin with no number: your last pinned message" "your last pinned message unpinned"
$TM send-keys -t tui "/set n 0" Enter
expect_screen "${TAG}tui//set n 0 is refused (an empty reply)" "n: expected an integer from 1"
$TM send-keys -t tui "/system Be brief." Enter
expect_screen "${TAG}tui//system sets the preamble of new conversations" "system preamble set: it opens every new conversation"
$TM send-keys -t tui "/show" Enter
expect_screen "${TAG}tui//show says the system preamble" "system preamble: Be brief\."
$TM send-keys -t tui "/save $TMP/saved.jsonl" Enter
expect_screen "${TAG}tui//save writes the conversation" "saved conversation 1 to"
check "${TAG}tui//save's file replays its turns (its new event included)" \
    "$KV" replay "$TMP/saved.jsonl" --verify
$TM send-keys -t tui "/save $TMP/tui.session" Enter
expect_screen "${TAG}tui//save onto the live session file is refused" "is this chat's session file"
$TM send-keys -t tui "/save $TMP/saved.jsonl" Enter
expect_screen "${TAG}tui//save onto a file that exists is refused" "saved.jsonl already exists; /save! FILE"
saved_inode=$(stat -c %i "$TMP/saved.jsonl")
$TM send-keys -t tui "/save! $TMP/saved.jsonl" Enter
await "/save! to replace saved.jsonl" '[ "$(stat -c %i "$TMP/saved.jsonl")" != "$saved_inode" ]'
check "${TAG}tui//save! replaces it" test "$(stat -c %i "$TMP/saved.jsonl")" != "$saved_inode"
# another kvchat's live session: never replaced, not even by /save!
rm -f "$TMP/live.jsonl" "$TMP/live.in"
mkfifo "$TMP/live.in"
"$KV" chat --no-tui -m "$TUIM" -n 2 --session "$TMP/live.jsonl" <"$TMP/live.in" >/dev/null \
    2>&1 &
live_pid=$!
exec 9>"$TMP/live.in"
echo "first" >&9
await "the other kvchat's first turn" 'grep -q turn_end "$TMP/live.jsonl" 2>/dev/null'
live_inode=$(stat -c %i "$TMP/live.jsonl")
for cmd in /save /save!; do # (the status line says one thing at a time: another thing between)
    $TM send-keys -t tui "/save $TMP/saved.jsonl" Enter
    wait_for "saved.jsonl already exists"
    $TM send-keys -t tui "$cmd $TMP/live.jsonl" Enter
    expect_screen "${TAG}tui/$cmd onto another kvchat's live session is refused" \
        "live.jsonl is being written by another kvchat"
done
echo "second" >&9
exec 9>&-
wait $live_pid
same "${TAG}tui/the other kvchat's session kept its file" "$live_inode" \
    "$(stat -c %i "$TMP/live.jsonl")"
same "${TAG}tui/the other kvchat's session kept both turns" 2 \
    "$(grep -c turn_end "$TMP/live.jsonl")"
$TM send-keys -t tui F2
if await "F2 to hide the panel" '! screen_text | grep -q "KV cache"'; then pass "${TAG}tui/F2 hides the panel"; else fail "${TAG}tui/F2 hides the panel" "still shown"; fi
$TM send-keys -t tui F2
expect_screen "${TAG}tui/F2 shows it again" "KV cache"
$TM send-keys -t tui F3
expect_screen "${TAG}tui/F3 widens the panel (3/5 of 120 columns)" "^.{48}┌─ KV cache"
$TM send-keys -t tui F3
expect_screen "${TAG}tui/F3 again: back to 2/5" "^.{72}┌─ KV cache"
$TM send-keys -t tui F4
expect_screen "${TAG}tui/F4 turns the mouse off, to select text" "mouse off: select text"
same "${TAG}tui/F4: the terminal has mouse reporting off" 0 "$($TM display -p -t tui '#{mouse_any_flag}')"
$TM send-keys -t tui F4
expect_screen "${TAG}tui/F4 again: the wheel back" "mouse on: the wheel scrolls"
$TM send-keys -t tui F5
expect_screen "${TAG}tui/F5 filters the log to evictions" "log: evictions"
$TM send-keys -t tui F5
expect_screen "${TAG}tui/F5 again: this conversation's lines" "log: this conv"
$TM send-keys -t tui F5 S-Up
expect_screen "${TAG}tui/Shift-Up scrolls the log back" "log: all, scrolled back"
$TM send-keys -t tui S-Down
$TM send-keys -t tui F6
expect_screen "${TAG}tui/F6 lists the conversations" "conv +tokens +bytes +shrd +state +used"
expect_screen "${TAG}tui/F6: the current one marked, each with its state" ">   1 +[0-9]+ +[0-9.]+ [KM]iB +[0-9]+  resident"
$TM send-keys -t tui F6
expect_screen "${TAG}tui/F6 again: the map and graph" "next eviction|no eviction ahead"
expect_screen "${TAG}tui/the graph has a legend and its scale" "E:evict +P:prepared +G:grow"
expect_screen "${TAG}tui/the graph's axis reads in bytes too" "│ *[0-9]+\.[0-9][KMG] "
$TM send-keys -t tui F1
expect_screen "${TAG}tui/F1 shows help" "Commands"
expect_screen "${TAG}tui/F1 help shows its widest line whole" "F4  mouse off/on \(select text\)"
expect_screen "${TAG}tui/F1 help lists the commands of the table" "/save \[FILE\]  /help  /quit"
$TM send-keys -t tui Escape # Esc closes the help and types nothing (a letter would be typed)
if ! await "Esc to close the help" '! screen_text | grep -q "Commands"'; then fail "${TAG}tui/Esc closes the help" "still open"; else pass "${TAG}tui/Esc closes the help"; fi
$TM send-keys -t tui "/quit" Enter
await "the chat's exit status" '[ -s "$TMP/tui.rc" ]'
same "${TAG}tui//quit exits 0" 0 "$(cat "$TMP/tui.rc" 2>/dev/null)"
expect_screen "${TAG}tui/on exit it says where the session is" "session saved in .*tui.session"
# its hint whole on a line of its own, never broken by the terminal's edge (80 columns: issue 62)
expect_screen "${TAG}tui/on exit the hint fits 80 columns" "^kvchat: kvchat replay plays it back, kvchat --resume continues it$"
check "${TAG}tui/history saved across runs" grep -q "Hello there" "$TMP/state/kvchat/history"
check "${TAG}tui/events logged while in the TUI" grep -q '"ev":"prefill"' "$TMP/tui.jsonl"

# two chats sharing one history file keep both's entries, and a closed terminal (SIGHUP) loses none
rm -rf "$TMP/hist2"
for w in ha hb; do
    $TM new-session -d -s $w -x 100 -y 30 \
        "XDG_STATE_HOME=$TMP/hist2 '$KV' -m '$TUIM' -n 2 --no-save; sleep 3600"
done
pane_has() { # (await's condition sees these locals, not this function's arguments)
    local pane=$1 pat=$2
    await "/$pat/ on tmux pane $pane" '$TM capture-pane -t "$pane" -p | grep -q -- "$pat"'
}
pane_has ha "Ctrl-C twice: quit" && pane_has hb "Ctrl-C twice: quit"
for step in "ha from A one" "hb from B one" "ha from A two"; do
    $TM send-keys -t "${step%% *}" "${step#* }" Enter
    await "'${step#* }' in the history" 'grep -qx "${step#* }" "$TMP/hist2/kvchat/history" 2>/dev/null'
done
$TM kill-session -t ha # the terminal closes: SIGHUP
$TM send-keys -t hb "/quit" Enter
await "the second chat's exit" '! pgrep -f "kvchat -m $TUIM -n 2 --no-save\$" >/dev/null'
same "${TAG}tui/two chats' history, one of them hung up" "from A one
from B one
from A two" "$(grep '^from' "$TMP/hist2/kvchat/history")"
$TM kill-session -t hb 2>/dev/null

# stopped from outside (kill -TSTP), then continued: the terminal is given back while stopped (no
# mouse reports, the shell's screen) and taken again, redrawn, on SIGCONT
$TM new-session -d -s st -x 100 -y 30 \
    "XDG_STATE_HOME=$TMP/tstp '$KV' -m '$TUIM' -n 2 --no-save --seed 77; sleep 3600"
pane_has st "Ctrl-C twice: quit"
st_pid=$(pgrep -f "^[^ ]*kvchat -m $TUIM -n 2 --no-save --seed 77")
modes() { $TM display -p -t st '#{mouse_standard_flag} #{alternate_on}'; }
same "${TAG}tui/before a stop: mouse reports on, the alternate screen" "1 1" "$(modes)"
kill -TSTP "$st_pid"
await "the stopped chat to give the terminal back" '[ "$(modes)" = "0 0" ]'
same "${TAG}tui/stopped (SIGTSTP): mouse reports off, the shell's screen" "0 0" "$(modes)"
$TM send-keys -t st "x" # would be a byte of a mouse report to a shell that had it on
kill -CONT "$st_pid"
await "the continued chat to take the terminal again" '[ "$(modes)" = "1 1" ]'
same "${TAG}tui/continued (SIGCONT): mouse reports on, the alternate screen" "1 1" "$(modes)"
expect_screen_of() { # expect_screen_of SESSION NAME PATTERN
    if pane_has "$1" "$3"; then pass "$2"; else fail "$2" "no /$3/ on screen"; fi
}
expect_screen_of st "${TAG}tui/continued: the screen is drawn again" "KV cache"
# Ctrl-Z suspends as in vim and htop (raw mode makes it a byte); F7-F12 type nothing
$TM send-keys -t st C-z
if await "Ctrl-Z to give the terminal back" '[ "$(modes)" = "0 0" ]' &&
    await "the chat to stop" '[ "$(ps -o stat= -p "$st_pid" | cut -c1)" = T ]'; then
    pass "${TAG}tui/Ctrl-Z suspends the chat, the terminal given back"
else fail "${TAG}tui/Ctrl-Z suspends the chat, the terminal given back" "modes $(modes)"; fi
kill -CONT "$st_pid"
await "the chat after Ctrl-Z to take the terminal again" '[ "$(modes)" = "1 1" ]'
$TM send-keys -t st F7 F8 F9 F10 F11 F12 "typed"
expect_screen_of st "${TAG}tui/F7-F12 type nothing into the message" "^> x\?typed *$"
$TM send-keys -t st "/quit" Enter
sleep 0.5
$TM kill-session -t st 2>/dev/null

# stopped by Ctrl-Z in a shell, lines printed meanwhile, fg, /quit: the exit message comes below
# the shell's lines (a second endwin on continuing put the cursor back where it was before the
# stop, and the message overwrote them)
$TM new-session -d -s fg -x 100 -y 30 "bash --norc --noprofile"
$TM send-keys -t fg "XDG_STATE_HOME=$TMP/fgh '$KV' -m '$TUIM' -n 2 --session '$TMP/fg.jsonl'" Enter
pane_has fg "Ctrl-C twice: quit"
$TM send-keys -t fg C-z
pane_has fg "Stopped"
$TM send-keys -t fg "echo while-stopped" Enter
pane_has fg "^while-stopped"
$TM send-keys -t fg "fg" Enter
await "the chat after fg" '[ "$($TM display -p -t fg "#{alternate_on}")" = 1 ]'
$TM send-keys -t fg "/quit" Enter
pane_has fg "session saved in"
same "${TAG}tui/after Ctrl-Z and fg, the exit message comes below the shell's lines" "below" \
    "$($TM capture-pane -t fg -p | awk '/^while-stopped/ { w = NR } /session saved in/ { s = NR }
        END { print (w && s > w) ? "below" : "line " s " of the message, " w " of the shell'"'"'s" }')"
$TM kill-session -t fg 2>/dev/null

# a model that says what it is (config.json's kvchat_about, as the shipped ones do): the chat
# shows it above the conversation, as text
cp -r "$TUIM" "$TMP/about-model"
"$PYTHON" -c 'import json, sys
c = json.load(open(sys.argv[1])); c.pop("kvchat_random_weights", None)
c["kvchat_about"] = "A small model trained here \033[31m(words, not answers)"
json.dump(c, open(sys.argv[1], "w"))' "$TMP/about-model/config.json"
$TM new-session -d -s ab -x 100 -y 30 "'$KV' -m '$TMP/about-model' -n 2 --no-save; sleep 3600"
expect_screen_of ab "${TAG}tui/a model's kvchat_about is shown above the chat, as text" \
    "^A small model trained here ^\[\[31m(words, not answers)"
$TM kill-session -t ab 2>/dev/null

# line mode typed at a terminal: Ctrl-C at the idle prompt once warns, twice quits (exit 0)
rm -f "$TMP/lm.rc"
$TM new-session -d -s lm -x 100 -y 30 \
    "'$KV' chat --no-tui -m '$TUIM' -n 2 --no-save; echo \$? >'$TMP/lm.rc'; sleep 3600"
pane_has lm "^you>"
$TM send-keys -t lm C-c
expect_screen_of lm "${TAG}tui/line mode: Ctrl-C at the idle prompt warns" "Ctrl-C again to quit"
$TM send-keys -t lm C-c
await "line mode's exit status" '[ -s "$TMP/lm.rc" ]'
same "${TAG}tui/line mode: Ctrl-C twice at the idle prompt quits" 0 \
    "$(cat "$TMP/lm.rc" 2>/dev/null)"
$TM kill-session -t lm 2>/dev/null
check "${TAG}tui//save file replays" "$KV" replay "$TMP/saved.jsonl" --no-tui
check "${TAG}tui/the whole session verifies (Ctrl-C stops, forks, /retry, /set, /system and all)" "$KV" replay "$TMP/tui.session" --verify
check "${TAG}tui/the session recorded the /system" grep -q '"ev":"system","conv":0,.*"text":"Be brief."' "$TMP/tui.session"
stop_tmux

# a message that cannot go in (every turn pinned in a full window): the error, and no trace of it in
# the pane, the conversation or the session's verdict; /retry then regenerates the last real reply
rm -f "$TMP/fail.rc" "$TMP/fail.session"
$TM new-session -d -s tui -x 120 -y 40 \
    "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --dtype f32 -n 20 --ctx 64 --seed 5 --session '$TMP/fail.session'; echo \$? > '$TMP/fail.rc'; sleep 3600"
wait_for "KV cache" 20
$TM send-keys -t tui "hello there" Enter
wait_for "gpt-2 +[^ ]" 30
wait_for "decode [0-9.]+ tok/s" 30
idle
$TM send-keys -t tui "/edit hello again" Enter
expect_screen "${TAG}tui//edit replaces your last message" "you +hello again"
idle
if screen_text | grep -q "hello there"; then fail "${TAG}tui//edit: the old message and its reply leave the pane" "still shown"
else pass "${TAG}tui//edit: the old message and its reply leave the pane"; fi
$TM send-keys -t tui "/pin 1" Enter
$TM send-keys -t tui "/pin 2" Enter
expect_screen "${TAG}tui/pinned every turn" "turn 2 pinned"
$TM send-keys -t tui "this message needs room the pinned turns leave nowhere at all, not one token, so it must fail here and now" Enter
expect_screen "${TAG}tui/a message that cannot go in: the error" "cannot make room in a window of 64"
idle
if screen_text | grep -q "you  *this message needs room"; then fail "${TAG}tui/a failed message leaves the pane" "it is still shown"
else pass "${TAG}tui/a failed message leaves the pane"; fi
same "${TAG}tui/a failed message: one reply on screen, under its own message" 1 "$(screen_text | grep -c '^gpt-2[ *]')"
turns=$(grep -c '"ev":"turn_end"' "$TMP/fail.session")
$TM send-keys -t tui "/retry" Enter
await "the retried reply's end" '[ "$(grep -c "\"ev\":\"turn_end\"" "$TMP/fail.session")" -gt $turns ]'
idle
# two presses just after a reply ended were meant for it: the chat goes on, not even armed to quit
$TM send-keys -t tui C-c C-c
expect_screen "${TAG}tui/Ctrl-C just after a reply ended is taken as meant for it" \
    "the reply had already ended"
same "${TAG}tui/... and two such presses do not quit" "" "$(cat "$TMP/fail.rc" 2>/dev/null)"
sleep 1.6 # past the grace
$TM send-keys -t tui "half a thought"
wait_for "^> half a thought"
$TM send-keys -t tui C-c
expect_screen "${TAG}tui/Ctrl-C with text typed empties the line, as in bash" "^> *$"
same "${TAG}tui/... and neither quits nor arms" "" "$(screen_text | grep -c 'again to quit' | grep -v '^0$')"
$TM send-keys -t tui C-c
expect_screen "${TAG}tui/Ctrl-C at the prompt asks once more" "press Ctrl-C again to quit"
same "${TAG}tui/a first Ctrl-C at the prompt does not quit" "" "$(cat "$TMP/fail.rc" 2>/dev/null)"
$TM send-keys -t tui C-c
await "fail.rc" '[ -s "$TMP/fail.rc" ]'
same "${TAG}tui/a second Ctrl-C quits, exit 0" 0 "$(cat "$TMP/fail.rc" 2>/dev/null)"
"$KV" replay "$TMP/fail.session" --verify >"$TMP/fail.verify" 2>&1
same "${TAG}tui/a session with a failed message verifies" "0|1" \
    "$?|$(grep -c 'failed, as recorded' "$TMP/fail.verify")"
same "${TAG}tui//retry after a failed message regenerates the last reply" "1 same" \
    "$(grep -c '"ev":"retry"' "$TMP/fail.session") $(grep -c 'tokens, same' "$TMP/fail.verify" | sed 's/^[1-9][0-9]*$/same/')"
stop_tmux

# line mode typed at a terminal: a prompt, a reply, and /quit ends it (it is not sent to GPT-2)
rm -f "$TMP/line.rc" "$TMP/line.session"
$TM new-session -d -s tui -x 120 -y 20 \
    "'$KV' chat --no-tui -m '$TUIM' --dtype f32 -n 4 --session '$TMP/line.session'; echo \$? > '$TMP/line.rc'; sleep 3600"
expect_screen "${TAG}tui/line mode at a terminal prompts" "^you>" 20
expect_screen "${TAG}tui/... saying how to get help and quit" "/help lists the commands, /quit"
$TM send-keys -t tui "hello" Enter
wait_for "^you> hello" 10
expect_screen "${TAG}tui/line mode replies, then prompts again" "^you>$" 30
$TM send-keys -t tui "/quit" Enter
await "line.rc" '[ -s "$TMP/line.rc" ]'
same "${TAG}tui/line mode: /quit ends it, exit 0, one message sent" "0 1" \
    "$(cat "$TMP/line.rc" 2>/dev/null) $(grep -c '"ev":"user"' "$TMP/line.session")"
expect_screen "${TAG}tui/line mode ends with its timings and evictions, as llama-cli does" \
    "1 turn: prompt [0-9]+ tok at [0-9.]+ tok/s, replies [0-9]+ tok at [0-9.]+ tok/s, 0 evictions"
stop_tmux

# the session it saved: replayed in the TUI (no model needed), and resumed with its history
$TM new-session -d -s tui -x 120 -y 40 "'$KV' replay '$TMP/tui.session'; echo \$? > '$TMP/replay.rc'; sleep 3600"
expect_screen "${TAG}tui/replay opens" "replay .*tui.session"
for _ in 1 2 3 4 5 6 7 8; do $TM send-keys -t tui +; done
expect_screen "${TAG}tui/replay plays the recorded turns" "you +and again"
expect_screen "${TAG}tui/replay shows the same statistics under the replies" "prompt [0-9]+ tok in .* · reply [0-9]+ tok at"
expect_screen "${TAG}tui/replay shows the recorded cache" "[0-9]+ / 256 tok"
for _ in 1 2 3 4 5 6 7 8 9 10; do $TM send-keys -t tui +; done
sleep 2
same "${TAG}tui/replay at max speed shows the recorded time, not the playback clock" "yes" \
    "$(screen_text | "$PYTHON" -c "
import re, sys
m = re.search(r' t ([0-9.]+) s ', sys.stdin.read())
print('yes' if m and float(m.group(1)) < 3600 else 'no: ' + (m.group(1) if m else 'no clock'))")"
$TM send-keys -t tui F1
expect_screen "${TAG}tui/F1 in replay shows its keys" "Replay keys"
$TM send-keys -t tui x
if ! await "a key to close replay's help" '! screen_text | grep -q "Replay keys"'; then fail "${TAG}tui/a key closes replay's help" "still open"; else pass "${TAG}tui/a key closes replay's help"; fi
$TM send-keys -t tui q
await "replay.rc" '[ -s "$TMP/replay.rc" ]'
same "${TAG}tui/replay q exits 0" 0 "$(cat "$TMP/replay.rc" 2>/dev/null)"
# a pause of 1000 s between two messages, at 1x: --idle-limit plays it (and every other) as 1 s,
# and the end says so
"$PYTHON" - "$TMP/tui.session" "$TMP/idle.session" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
users = [i for i, e in enumerate(evs) if e.get("ev") == "user"]
for e in evs[users[1]:]:
    if "t" in e:
        e["t"] += 1000
open(sys.argv[2], "w").write("".join(json.dumps(e) + "\n" for e in evs))
PY
$TM kill-session -t tui 2>/dev/null
$TM new-session -d -s tui -x 120 -y 40 "'$KV' replay '$TMP/idle.session' --idle-limit 1; sleep 3600"
expect_screen "${TAG}tui/replay --idle-limit plays a 1000 s pause as 1 s, and says where it ends" \
    "END OF SESSION" 120
stop_tmux
# a fatal signal gives the terminal back (alternate screen and mouse reporting off), in replay as in
# the chat: term_gives_back NAME WAIT_PATTERN COMMAND
term_gives_back() {
    rm -f "$TMP/term.rc"
    $TM new-session -d -s tui -x 120 -y 40 "$3; echo \$? > '$TMP/term.rc'; sleep 3600"
    wait_for "$2" 20
    same "${TAG}tui/$1 takes the terminal (alternate screen, mouse reports)" "1 1" \
        "$($TM display -p -t tui '#{alternate_on} #{mouse_any_flag}')"
    pkill -TERM -P "$($TM display -p -t tui '#{pane_pid}')" kvchat
    await "term.rc" '[ -s "$TMP/term.rc" ]'
    same "${TAG}tui/$1 dies of SIGTERM" 143 "$(cat "$TMP/term.rc" 2>/dev/null)"
    same "${TAG}tui/$1 killed by SIGTERM gives the terminal back" "0 0" \
        "$($TM display -p -t tui '#{alternate_on} #{mouse_any_flag}')"
    stop_tmux
}
term_gives_back replay "replay .*tui.session" "'$KV' replay '$TMP/tui.session'"
term_gives_back chat "conv 1/1" "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --no-save"
$TM new-session -d -s tui -x 120 -y 40 "XDG_STATE_HOME=$TMP/state '$KV' --resume '$TMP/tui.session' --no-save; sleep 3600"
expect_screen "${TAG}tui/resume shows the history" "resumed: the history above was restored" 30
expect_screen "${TAG}tui/resume keeps the messages" "you +and again"
$TM send-keys -t tui "/quit" Enter
stop_tmux

# hostile text from a session file is drawn harmlessly on a terminal
{ head -1 "$TMP/tui.session"; printf '%s\n' '{"ev":"user","conv":1,"t":0,"text":"\u001b[2J\u001b[31mRED\u0007"}'; } >"$TMP/evil.jsonl"
$TM new-session -d -s tui -x 100 -y 10 "'$KV' replay '$TMP/evil.jsonl' --no-tui; sleep 3600"
expect_screen "${TAG}tui/escape sequences from a file are shown, not run" "you: \^\[\[2J\^\[\[31mRED\^G"
stop_tmux

# not a terminal: line mode instead of drawing
same "${TAG}tui/no terminal: line mode" 2 "$(printf 'one\ntwo\n' | "$KV" -m "$TUIM" -n 4 | wc -l)"

# a 100 KB bracketed paste holding a Ctrl-C, a Ctrl-N and line breaks: inserted as text in one piece
# (it took minutes byte by byte), nothing in it acts as a key, and it is sent as one message that
# keeps its line breaks
"$PYTHON" - "$TMP/paste.txt" <<'PY'
import sys
body = "".join("word%d " % i for i in range(20000))[:100000]
open(sys.argv[1], "w").write(body[:50000] + "\x03\x0e\nnext line\r\n" + body[50000:] + " PASTE-END")
PY
stop_tmux
rm -f "$TMP/paste.rc" "$TMP/paste.session"
$TM new-session -d -s tui -x 120 -y 40 \
    "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --dtype f32 -n 4 --session '$TMP/paste.session'; echo \$? > '$TMP/paste.rc'; sleep 3600"
wait_for "conv 1/1" 20
$TM load-buffer "$TMP/paste.txt"
$TM paste-buffer -p -t tui
expect_screen "${TAG}tui/a 100 KB paste is in the input line" "PASTE-END" 20
expect_screen "${TAG}tui/a pasted Ctrl-N opens no conversation, a pasted Ctrl-C does not quit" "conv 1/1"
$TM send-keys -t tui Enter
expect_screen "${TAG}tui/the pasted message is sent, its reply under it" "gpt-2 +[^ ]" 30
expect_screen "${TAG}tui/the notice that it was cut stands apart from the reply" "its beginning was cut"
expect_screen "${TAG}tui/... and says how many of its tokens were dropped" "[0-9]+ tokens dropped"
same "${TAG}tui/the reply comes under the notice, where replies go" "notice, then reply" "$(screen_text |
    awk '/its beginning was cut/ && !n {n = NR} /^gpt-2 / && !g {g = NR} END {print n && g && n < g ? "notice, then reply" : "reply above the notice"}')"
wait_for "Ctrl-C twice: quit" 60
# a message typed over several lines, between """ and """
$TM send-keys -t tui '"""' Enter
expect_screen "${TAG}tui/\"\"\" opens a message over several lines" 'end it with """'
$TM send-keys -t tui "line one" Enter
expect_screen "${TAG}tui/... and shows its lines as they are typed" '^typing +line one'
expect_screen "${TAG}tui/... and how it ends" '\(1 line: """ at a line.s end sends it'
# Ctrl-C drops an unfinished block, saying so (as bash and python drop a continuation); a second
# Ctrl-C then only arms the quit
$TM send-keys -t tui C-c
expect_screen "${TAG}tui/Ctrl-C drops an unfinished message over lines, saying so" \
    'dropped the unfinished message of 1 line'
$TM send-keys -t tui '"""' Enter
$TM send-keys -t tui "line one" Enter
$TM send-keys -t tui 'line two"""' Enter
await "the multi-line message's reply" \
    '[ "$(grep -c "\"ev\":\"turn_end\"" "$TMP/paste.session")" -ge 2 ]'
$TM send-keys -t tui "/quit" Enter
await "paste.rc" '[ -s "$TMP/paste.rc" ]'
# (tmux's paste-buffer sends each line break as \r, as terminals do: the file's \r\n arrives as two)
same "${TAG}tui/the paste arrived as one message of its length, its line breaks kept" "2 100022 3" \
    "$("$PYTHON" -c '
import json, sys
u = [json.loads(l)["text"] for l in open(sys.argv[1]) if "\"ev\":\"user\"" in l]
print(len(u), len(u[0]) if u else 0, u[0].count("\n") if u else 0)' "$TMP/paste.session")"
same "${TAG}tui/the multi-line message is one message, its break kept" "line one|line two" \
    "$("$PYTHON" -c '
import json, sys
u = [json.loads(l)["text"] for l in open(sys.argv[1]) if "\"ev\":\"user\"" in l]
print(u[1].replace(chr(10), "|") if len(u) > 1 else "")' "$TMP/paste.session")"
stop_tmux

# a small window that slides every turn: between messages the next eviction is prepared, the forecast
# line says so, and the one that follows is swapped in (the log marks it)
$TM new-session -d -s tui -x 160 -y 48 "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --dtype f32 -n 10 --ctx 48 \
    --evict-min 8 --session '$TMP/slide.session'; sleep 3600"
wait_for "conv 1/1" 30
k=0
for m in "Hello there" "How are you?" "Tell me more"; do
    $TM send-keys -t tui "$m" Enter
    k=$((k + 1))
    await "the reply to '$m'" '[ "$(grep -c "\"ev\":\"turn_end\"" "$TMP/slide.session")" -ge $k ]'
done
expect_screen "${TAG}tui/the forecast says the next eviction is prepared" "drops [0-9]+.*, prepared" 15
$TM send-keys -t tui "And then what?" Enter
expect_screen "${TAG}tui/the log marks an eviction that was prepared" "evicted [0-9]+ tok; [0-9]+ re-prefilled ahead" 30
stop_tmux

# /set n raised while a reply streams, under AddressSanitizer: the reply keeps the length it was sized
# for (it overflowed the heap), the setting applies from the next reply and is recorded after the turn
AKV=${BUILD:-build}/asan/kvchat
if [ -x "$AKV" ]; then
    rm -f "$TMP/set.rc" "$TMP/set.session"
    $TM new-session -d -s tui -x 120 -y 40 "ASAN_OPTIONS=detect_leaks=0 XDG_STATE_HOME=$TMP/state '$AKV' -m '$TUIM' --dtype f32 \
        -n 1500 --ctx 256 --session '$TMP/set.session' 2>'$TMP/set.err'; echo \$? > '$TMP/set.rc'; sleep 3600"
    wait_for "conv 1/1" 30
    $TM send-keys -t tui "Tell me a long story" Enter
    wait_for "generating" 30
    $TM send-keys -t tui "/set n 3000" Enter
    expect_screen "${TAG}tui/asan: /set during a reply waits for its end" "n = 3000 from the next reply" 30
    wait_for "Ctrl-C twice: quit" 300
    expect_screen "${TAG}tui/asan: the new n applies after the reply" "n 3000 .*Ctrl-C twice: quit"
    $TM send-keys -t tui "/quit" Enter
    await "set.rc" '[ -s "$TMP/set.rc" ]'
    same "${TAG}tui/asan: the chat exits 0 after /set mid-reply" 0 "$(cat "$TMP/set.rc" 2>/dev/null)"
    check "${TAG}tui/asan: no sanitizer report" bash -c "! grep -q -E 'AddressSanitizer|runtime error' '$TMP/set.err'"
    same "${TAG}tui/asan: the reply kept its 1500 tokens and the set follows its turn_end" "1500 set" "$("$PYTHON" -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])][1:]
end = next(i for i, e in enumerate(ev) if e["ev"] == "turn_end")
after = [e["ev"] for e in ev[end + 1:] if e["ev"] == "set"]
print(sum(e["ev"] == "token" for e in ev[:end]), after[0] if after else "none")' "$TMP/set.session")"
    stop_tmux
else
    skip "${TAG}tui/asan: /set during a reply" "no sanitizer build at $AKV"
fi

# past the 64 conversations that have a pane, /new is refused and nothing is made (it was made, then
# refused: "conv 64/65", and messages went to conversation 64)
stop_tmux
$TM new-session -d -s tui -x 120 -y 40 \
    "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' -n 2 --no-save; sleep 3600"
wait_for "conv 1/1" 20
for i in $(seq 65); do $TM send-keys -t tui "/new" Enter; done
expect_screen "${TAG}tui//new past 64 conversations is refused" \
    "/new: no more conversations: this chat holds 64"
expect_screen "${TAG}tui/and makes none: 64 of 64" "conv 64/64"
stop_tmux

# --draft: the drafter's cache and its acceptance on the panel, a draft column in F6's table,
# drafted tokens underlined until F7
stop_tmux
$TM new-session -d -s tui -x 140 -y 44 \
    "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --dtype f32 -n 24 --temp 0 --draft self-q8 --no-save; sleep 3600"
wait_for "conv 1/1" 20
$TM send-keys -t tui "Hello there" Enter
expect_screen "${TAG}tui/--draft: the panel shows the drafter's cache" "draft cache [0-9]+ tok" 30
expect_screen "${TAG}tui/--draft: and its acceptance and tokens a pass" \
    "accepted [0-9]+%.*of tested [0-9]+%.*[0-9.]+ tok/pass" 30
expect_screen "${TAG}tui/--draft: the reply's line says its drafts" "drafts [0-9]+ of [0-9]+ kept" 30
underlined() { $TM capture-pane -t tui -p -e | grep -c $'\e\\[4m'; }
wait_for "Ctrl-C twice: quit" 60
same "${TAG}tui/--draft: drafted tokens are underlined" 1 "$([ "$(underlined)" -gt 0 ] && echo 1)"
$TM send-keys -t tui F7
expect_screen "${TAG}tui/--draft: F7 turns the marks off" "drafted tokens not marked"
same "${TAG}tui/--draft: ... and none is underlined" 0 "$(underlined)"
$TM send-keys -t tui F6
expect_screen "${TAG}tui/--draft: F6's table has the draft column" "conv +tokens.*used +draft"
$TM send-keys -t tui F6
$TM resize-window -t tui -x 80 -y 24
expect_screen "${TAG}tui/--draft at 80x24: the drafter takes a row, the map keeps its legend" \
    "cell=[0-9]+tok u:you"
expect_screen "${TAG}tui/--draft at 80x24: ... and its forecast" "next eviction|no eviction ahead"
stop_tmux


# keys with a modifier the chat gives no meaning type nothing (Shift-Left/Right moved the cursor's
# way and typed D or C; Shift-F1 typed P); Shift-Left moves as Left does
$TM new-session -d -s tui -x 100 -y 30 "XDG_STATE_HOME=$TMP/state '$KV' -m '$TUIM' --dtype f32 -n 4 --no-save; sleep 3600"
wait_for "conv 1/1" 20
$TM send-keys -t tui "abc" S-Left S-F1 S-Right S-Left "Z"
expect_screen "${TAG}tui/Shift-arrows move, Shift-F1 types nothing" "abZc"
stop_tmux
