#!/usr/bin/python3
"""Breaks a copy of a checkpoint directory in one named way, for the bad-input tests.
usage: damage_checkpoint.py DIR KIND"""
import json
import os
import struct
import sys

d, kind = sys.argv[1], sys.argv[2]
st = os.path.join(d, "model.safetensors")
raw = open(st, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]


def write_header(h, payload=None):
    js = json.dumps(h).encode()
    js += b" " * (-len(js) % 8)
    open(st, "wb").write(struct.pack("<Q", len(js)) + js + (data if payload is None else payload))


def drop(name):
    """removes a tensor and its bytes, shifting the later offsets"""
    b, e = header[name]["data_offsets"]
    del header[name]
    for v in header.values():
        if "data_offsets" in v and v["data_offsets"][0] >= e:
            v["data_offsets"] = [v["data_offsets"][0] - (e - b), v["data_offsets"][1] - (e - b)]
    return data[:b] + data[e:]


cfg_path = os.path.join(d, "config.json")
cfg = json.load(open(cfg_path))
if kind == "empty":
    open(st, "wb").close()
elif kind == "truncated":
    open(st, "wb").write(raw[: len(raw) // 2])
elif kind == "header-past-eof":
    open(st, "wb").write(struct.pack("<Q", len(raw)) + raw[8:])
elif kind == "header-huge":
    open(st, "wb").write(struct.pack("<Q", 10 ** 12) + raw[8:])
elif kind == "bad-json":
    js = raw[8:8 + n].replace(b'"dtype"', b'"dtype" "', 1)
    open(st, "wb").write(struct.pack("<Q", len(js)) + js + data)
elif kind == "unknown-dtype":
    header["wte.weight"]["dtype"] = "F12"
    write_header(header)
elif kind == "int-dtype":
    header["wpe.weight"]["dtype"] = "I32"
    write_header(header)
elif kind == "missing-tensor":
    write_header(header, drop("h.0.mlp.c_fc.weight"))
elif kind == "wrong-shape":
    # keep the byte size consistent so only the shape check can catch it
    t = header["h.0.attn.c_attn.weight"]
    payload = drop("h.0.attn.c_attn.weight")
    last = max(v["data_offsets"][1] for v in header.values() if "data_offsets" in v)
    header["h.0.attn.c_attn.weight"] = {"dtype": t["dtype"], "shape": [16, 16], "data_offsets": [last, last + 16 * 16 * 4]}
    write_header(header, payload + b"\0" * (16 * 16 * 4))
elif kind == "overlap":
    names = sorted((v["data_offsets"][0], k) for k, v in header.items() if "data_offsets" in v)
    b, e = header[names[1][1]]["data_offsets"]
    header[names[1][1]]["data_offsets"] = [b - 4, e - 4]
    write_header(header)
elif kind == "inf-weight":
    # element 5 of a product's weight (F32 in the file) becomes +inf
    b = header["h.0.mlp.c_fc.weight"]["data_offsets"][0] + 5 * 4
    data = data[:b] + struct.pack("<f", float("inf")) + data[b + 4:]
    write_header(header)
elif kind == "config-embd":
    cfg["n_embd"] = 32
    json.dump(cfg, open(cfg_path, "w"))
elif kind == "config-json":
    open(cfg_path, "w").write('{"n_layer": 1,\n "n_head": }')
elif kind == "config-missing-key":
    del cfg["n_layer"]
    json.dump(cfg, open(cfg_path, "w"))
elif kind == "config-heads":
    cfg["n_head"] = 3
    json.dump(cfg, open(cfg_path, "w"))
elif kind == "no-vocab":
    os.remove(os.path.join(d, "vocab.json"))
elif kind == "bad-merges":
    open(os.path.join(d, "merges.txt"), "w").write("#version: 0.2\nqqqzzz xxxyyy\n")
else:
    sys.exit("unknown damage " + kind)
