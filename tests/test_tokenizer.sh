# kvchat's tokenizer against an independent Python encoder (tests/reference/bpe_ref.py: OpenAI's
# algorithm with the `regex` module) on a corpus of awkward strings, one file per case.
# Sourced by run.sh.

T=$TMP/tok
mkdir -p "$T"
"$PYTHON" - "$T" <<'PY'
import random, sys
d = sys.argv[1]
cases = [
    "Hello world", " Hello world", "hello world", "The quick brown fox jumps over the lazy dog.",
    "emoji 🙂👍🏽👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵", "中文字符和日本語のテキスト、한국어", "combining e\u0301 a\u030a o\u0308\u0304",
    "control \x00\x01\x07\x1b[31mred\x1b[0m \x7f", "tabs\tand\r\nCRLF\r\n\r\nnewlines\n\n\n", "   leading   and  trailing   ",
    "it's they're we've I'm you'll he'd IT'S", "numbers 0 00 000 0000 000000000 3.14159 1,000,000 ١٢٣ ½",
    "x = f(y) + 2*z; // code {}[]<>!?@#$%^&*", "Ünïcödé ßtraße ﬁ ǅ İ", "\u00a0nbsp\u2003em\u3000ideographic\u2028line",
    "\x1c\x1d\x1e\x1f separators \x85 next-line \x0b\x0c", "<|endoftext|> as text", "a" * 3000, " " * 50 + "x",
    "zero\u200bwidth\u200djoiner\ufeffbom", "mixed 123abc abc123 _under_score", "\U0001F600" * 40,
]
random.seed(1)
for i in range(40):  # random unicode soup from several blocks
    cps = [random.choice([random.randint(32, 126), random.randint(0xa0, 0x2ff), random.randint(0x400, 0x4ff),
                          random.randint(0x4e00, 0x4fff), random.randint(0x1f300, 0x1f64f), 32, 10, 9])
           for _ in range(random.randint(1, 80))]
    cases.append("".join(map(chr, cps)))
for i, c in enumerate(cases):
    open("%s/%03d.txt" % (d, i), "wb").write(c.encode("utf-8", "surrogatepass"))
# invalid UTF-8 (replaced by U+FFFD, as documented)
for i, b in enumerate([b"a\xffb", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80x", b"\xf4\x90\x80\x80", b"ok \xc0\xaf ok", b"\x80\x80\x80"]):
    open("%s/bad%02d.txt" % (d, i), "wb").write(b)
PY
"$PYTHON" tests/reference/bpe_ref.py assets/vocab.json assets/merges.txt "$T"/*.txt >"$T/want" ||
    fail "${TAG}tok/reference encoder ran" "bpe_ref.py failed"
i=0
mismatch=""
for f in "$T"/*.txt; do
    i=$((i + 1))
    got=$("$KV" tokenize -m assets <"$f")
    want=$(sed -n "${i}p" "$T/want")
    [ "$got" == "$want" ] || mismatch="$mismatch $(basename "$f")"
done
if [ -z "$mismatch" ]; then
    pass "${TAG}tok/corpus of $i strings equals the reference encoder"
else
    fail "${TAG}tok/corpus equals the reference encoder" "differs on:$mismatch"
fi
