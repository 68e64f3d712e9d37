# Sourced by bench_peer.sh and accuracy.sh: the checkpoint MODEL as GGUF files for llama.cpp in DIR,
# f32 written by hf_to_gguf.py, the other types by llama-quantize from it (kept when already there).
# Needs LQ (llama-quantize), PY and LLAMA set. peer_gguf MODEL DIR TYPES (comma-separated kvchat names)
peer_gguf() {
    local model=$1 dir=$2 t q
    [ -e "$dir/f32.gguf" ] || "$PY" tests/peer/hf_to_gguf.py "$model" "$dir/f32.gguf" "$LLAMA" || return 1
    for t in ${3//,/ }; do
        q=$(case $t in bf16) echo BF16 ;; f16) echo F16 ;; q8) echo Q8_0 ;; q4) echo Q4_0 ;; *) echo ;; esac)
        [ -z "$q" ] || [ -e "$dir/$t.gguf" ] || "$LQ" "$dir/f32.gguf" "$dir/$t.gguf" "$q" >"$dir/quantize.log" 2>&1 || {
            echo "llama-quantize to $q failed: $(tail -1 "$dir/quantize.log")"; return 1; }
    done
}
