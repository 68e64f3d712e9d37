"""A Hugging Face GPT-2 directory (config.json, model.safetensors, vocab.json, merges.txt) as an f32
GGUF file for llama.cpp, the peer kvchat is measured against (tests/peer/bench_peer.sh): the same
tensors under llama.cpp's GPT-2 names, the Conv1D matrices transposed to [out, in] as llama.cpp's own
converter does, and the byte-level BPE vocabulary. llama.cpp's convert_hf_to_gguf.py needs PyTorch;
this needs numpy and llama.cpp's gguf-py (LLAMA_CPP/gguf-py). Other dtypes come from llama-quantize.
Usage: hf_to_gguf.py MODEL_DIR OUT.gguf LLAMA_CPP
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16}


def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, DTYPES[t["dtype"]]).astype(np.float32)
        out[name.removeprefix("transformer.")] = arr.reshape(t["shape"])
    return out


def main():
    model, dest, llama = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf

    cfg = json.load(open(os.path.join(model, "config.json")))
    L, C, H = cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
    t = tensors(os.path.join(model, "model.safetensors"))
    w = gguf.GGUFWriter(dest, "gpt2")
    w.add_name(os.path.basename(os.path.normpath(model)))
    w.add_context_length(cfg.get("n_ctx", cfg.get("n_positions")))
    w.add_embedding_length(C)
    w.add_feed_forward_length(4 * C)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_layer_norm_eps(cfg.get("layer_norm_epsilon", 1e-5))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = json.load(open(os.path.join(model, "vocab.json"), encoding="utf-8"))
    tokens = [None] * (max(vocab.values()) + 1)
    for tok, i in vocab.items():
        tokens[i] = tok
    eos = vocab.get("<|endoftext|>", len(tokens) - 1)
    merges = [m for m in open(os.path.join(model, "merges.txt"), encoding="utf-8").read().split("\n")
              if m and not m.startswith("#version")]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if i == eos else gguf.TokenType.NORMAL for i in range(len(tokens))])
    w.add_token_merges(merges)
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    names = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    w.add_tensor("token_embd.weight", t["wte.weight"])
    w.add_tensor("position_embd.weight", t["wpe.weight"])
    w.add_tensor("output_norm.weight", t["ln_f.weight"])
    w.add_tensor("output_norm.bias", t["ln_f.bias"])
    for i in range(L):
        for hf, ours in names.items():
            for kind in ("weight", "bias"):
                a = t["h.%d.%s.%s" % (i, hf, kind)]
                if kind == "weight" and not hf.startswith("ln"):
                    a = np.ascontiguousarray(a.T)  # Conv1D [in, out] -> [out, in]
                w.add_tensor("blk.%d.%s.%s" % (i, ours, kind), a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


main()
