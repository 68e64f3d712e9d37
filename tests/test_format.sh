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
