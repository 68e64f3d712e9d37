# Every C, CUDA and C++ file as .clang-format has it (Debian's clang-format 14: another version
# formats some lines differently, so there the check is skipped, saying why). Sourced by run.sh.
fmt_files() { git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cpp'; }
fmt_major=$(clang-format --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if ! git rev-parse --git-dir >/dev/null 2>&1; then
    skip "format/the tree is formatted" "not a git checkout (the files to check are git's)"
elif [ "$fmt_major" != 14 ]; then
    skip "format/the tree is formatted" "clang-format 14 is the reference (found: ${fmt_major:-none})"
else
    bad=$(fmt_files | while read -r f; do
        clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || echo "$f"
    done)
    same "${TAG}format/every C, CUDA and C++ file is as clang-format writes it (clang-format -i)" \
        "" "$(echo "$bad" | head -5 | tr '\n' ' ' | sed 's/ $//')"
fi

# An event's fields are a struct's members (model/event_schema.h): the emitter of a misspelled one
# does not compile, and the same line spelled right does (so the error is the spelling's).
event_compiles() {
    printf '#include "model/events.h"\nvoid f(ev_bus *b) { %s(b, 1, &(%s){.%s = 1}); }\n' \
        ev_emit_prefill ev_prefill "$1" |
        ${CC:-cc} -std=c11 -D_GNU_SOURCE -fsyntax-only -I. -x c - 2>"$TMP/ev.err"
}
name="${TAG}source/a misspelled event field does not compile"
if ! event_compiles cached; then
    fail "$name" "the right spelling did not compile: $(head -1 "$TMP/ev.err")"
elif event_compiles cahced; then
    fail "$name" "ev_prefill{.cahced} compiled"
elif ! grep -q "cahced" "$TMP/ev.err"; then
    fail "$name" "$(head -1 "$TMP/ev.err")"
else
    pass "$name"
fi
