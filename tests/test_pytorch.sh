# pytorch_model.bin as PyTorch itself writes it (tests/reference/torch_ckpt.py, Debian's python3-torch):
# every form gives the same logits as the safetensors load of the same weights, bit for bit, and the
# NumPy reference's to 1e-5; kvchat convert writes those weights as safetensors. Hostile files are in
# test_bad_input.sh (run under the sanitizers too). Sourced by run.sh with KV, TAG, TMP, PYTHON.

TORCH=tests/reference/torch_ckpt.py
PT=$TMP/pytorch
IDS=464,3290,373,1043,287,257,2214,50256,0,31373,995,13
rm -rf "$PT"
mkdir -p "$PT"
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    skip "${TAG}pytorch/checkpoints" "python3-torch is not installed (make test installs it)"
    return 0
fi

"$KV" make-tiny-model "$PT/f32" --layers 2 --heads 4 --embd 64 --ctx 64 --seed 7 >/dev/null
"$KV" make-tiny-model "$PT/f16" --layers 2 --heads 4 --embd 64 --ctx 64 --seed 7 --dtype f16 >/dev/null
logits() { # logits DIR DTYPE OUT
    "$KV" generate -m "$1" --dtype "$2" --cache-dtype f32 --prompt-ids "$IDS" -n 1 --temp 0 -q --dump-logits "$3" >/dev/null
}
for dt in f32 f16; do
    logits "$PT/$dt" "$dt" "$PT/$dt.logits"
    ROUND=$([ $dt = f16 ] && echo f16) "$PYTHON" tests/reference/gpt2_ref.py "$PT/$dt" logits "$IDS" "$PT/$dt.npy"
done

# source dtype, format, LM head, storage layout, names
while read -r dt fmt head layout prefix proto; do
    name="$dt $fmt, $head head, $layout, $prefix${proto:+, pickle protocol $proto}"
    dir=$PT/$dt-$fmt-$head-$layout-$prefix$proto
    if ! "$PYTHON" "$TORCH" "$PT/$dt" "$dir" "$fmt" "$head" "$layout" "$prefix" $proto 2>"$PT/err"; then
        fail "${TAG}pytorch/$name" "torch_ckpt.py failed: $(tail -1 "$PT/err")"
        continue
    fi
    if ! logits "$dir" "$dt" "$dir.logits" 2>"$PT/err"; then
        fail "${TAG}pytorch/$name" "$(tail -1 "$PT/err")"
        continue
    fi
    if cmp -s "$dir.logits" "$PT/$dt.logits"; then pass "${TAG}pytorch/$name = safetensors, bit for bit"
    else fail "${TAG}pytorch/$name" "logits differ from the safetensors load"; fi
    e=$(rel_err "$dir.logits" "$PT/$dt.npy")
    if under "$e" 1e-5; then pass "${TAG}pytorch/$name = NumPy (rel err $e)"
    else fail "${TAG}pytorch/$name" "relative L2 error $e against NumPy (limit 1e-5)"; fi
done <<'VARIANTS'
f32 zip tied plain bare
f32 zip separate plain prefix
f32 zip tied strided prefix
f32 zip none strided bare
f32 legacy tied plain prefix
f32 legacy separate strided bare
f16 zip tied plain prefix
f16 zip separate strided bare
f16 legacy tied strided prefix
f32 zip tied strided bare 4
f16 legacy separate plain prefix 4
VARIANTS

same "${TAG}pytorch/info names the file it read" "weights     12.7 MiB in pytorch_model.bin (f32); 12.7 MiB as loaded (f32)" \
    "$("$KV" info -m "$PT/f32-zip-tied-plain-bare" --dtype f32 2>/dev/null | grep '^weights')"

# a session recorded on the .bin resumes after the conversion (the fingerprint follows the .bin)
dir=$PT/f32-legacy-tied-plain-prefix
echo hi | "$KV" chat --no-tui -m "$dir" -n 2 --session "$PT/s.jsonl" >/dev/null 2>&1

# convert: the same tensors as safetensors, the tied head left out, then loaded in its place
same_tensors() { # same_tensors A B: every tensor of A's model.safetensors in B's, equal, names without prefix
    "$PYTHON" -c "
import sys; sys.path.insert(0, 'tests/reference'); import numpy as np; from gpt2_ref import load_safetensors
a, b = (load_safetensors(d + '/model.safetensors') for d in sys.argv[1:3])
bad = [k for k in a if k not in b or a[k].shape != b[k].shape or not np.array_equal(a[k], b[k])]
print('same' if not bad and 'lm_head.weight' not in b else 'different: ' + ' '.join(bad or ['lm_head.weight']))" "$1" "$2"
}
for v in f32-legacy-tied-plain-prefix f16-zip-separate-strided-bare; do
    dir=$PT/$v
    out=$("$KV" convert "$dir" 2>&1)
    same "${TAG}pytorch/convert $v says what it wrote" "$dir/model.safetensors: 30 tensors, $([ "${v%%-*}" = f32 ] && echo 12.7 || echo 6.4) MiB (lm_head.weight left out: it holds wte's values)" "$out"
    same "${TAG}pytorch/convert $v: the tensors as they were" same "$(same_tensors "$PT/${v%%-*}" "$dir")"
    logits "$dir" "${v%%-*}" "$dir.st.logits"
    if cmp -s "$dir.st.logits" "$PT/${v%%-*}.logits"; then pass "${TAG}pytorch/convert $v: same logits, bit for bit"
    else fail "${TAG}pytorch/convert $v" "logits differ after converting"; fi
    same "${TAG}pytorch/convert $v: loads the safetensors file first" "model.safetensors" \
        "$("$KV" info -m "$dir" 2>/dev/null | sed -n 's/^weights .* in \([^ ]*\) .*/\1/p')"
done
check "${TAG}pytorch/a session recorded before convert resumes after it" \
    bash -c "echo again | '$KV' chat --no-tui --resume '$PT/s.jsonl' -n 2"
expect_error "${TAG}pytorch/convert keeps an existing model.safetensors" 1 \
    "model.safetensors already exists \(kvchat loads it before pytorch_model.bin; --force replaces it\)$" "$KV" convert "$dir"
before=$(cksum <"$dir/model.safetensors")
"$KV" convert "$dir" --force >/dev/null 2>&1
same "${TAG}pytorch/convert --force rewrites it, the same bytes, no part file left" "$before" \
    "$(cksum <"$dir/model.safetensors")$(ls "$dir" | grep part)"
# a link planted where the part goes is removed, never followed
echo "not yours" >"$PT/victim"
ln -sf "$PT/victim" "$dir/model.safetensors.part"
"$KV" convert "$dir" --force >/dev/null 2>&1
same "${TAG}pytorch/convert over a planted .part link: the link's target untouched, the file written" \
    "not yours|$before" "$(cat "$PT/victim")|$(cksum <"$dir/model.safetensors")"
expect_error "${TAG}pytorch/convert without a .bin" 1 "f32/pytorch_model.bin: no such file \(convert reads a PyTorch checkpoint\)$" \
    "$KV" convert "$PT/f32"
expect_error "${TAG}pytorch/convert without a directory" 2 "which directory?" "$KV" convert
expect_error "${TAG}pytorch/convert unknown flag" 2 "unknown option '--frob'" "$KV" convert "$dir" --frob

# names a safetensors file cannot hold are refused, and a model.safetensors already there is kept
for bad in metadata utf8; do
    d=$PT/badname-$bad
    rm -rf "$d" && cp -r "$PT/f32" "$d"
    "$PYTHON" - "$d" "$bad" <<'PY'
import sys, torch
name = "__metadata__" if sys.argv[2] == "metadata" else "h.\udcff.weight"
torch.save({"transformer.wte.weight": torch.zeros(4, 4), name: torch.ones(2)},
           sys.argv[1] + "/pytorch_model.bin")
PY
    cp "$d/model.safetensors" "$d/before"
    expect_error "${TAG}pytorch/convert refuses a tensor name ($bad)" 1 \
        "tensor name '.*' (is the name of the metadata entry|is not UTF-8).*cannot hold it" \
        "$KV" convert "$d" --force
    check "${TAG}pytorch/... the model.safetensors there is untouched ($bad)" \
        cmp "$d/before" "$d/model.safetensors"
    check "${TAG}pytorch/... and no part is left ($bad)" test ! -e "$d/model.safetensors.part"
done
