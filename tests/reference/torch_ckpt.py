#!/usr/bin/python3
"""PyTorch writes the checkpoints kvchat must read: the test oracle for pytorch_model.bin.

usage: torch_ckpt.py SRC OUT FORMAT HEAD LAYOUT PREFIX [PROTOCOL]
    SRC's model.safetensors (parsed here, not by kvchat) saved by torch.save as OUT/pytorch_model.bin,
    beside copies of SRC's config.json, vocab.json and merges.txt.
    FORMAT zip (torch >= 1.6) | legacy (_use_new_zipfile_serialization=False, as 2019-2020 checkpoints)
    HEAD   tied (lm_head.weight is wte's tensor) | separate (a copy) | none
    LAYOUT plain | strided (matrices stored transposed and viewed back, every vector a view at an
           offset into one storage per layer, wpe a slice of a larger tensor)
    PREFIX prefix (transformer. names) | bare
    PROTOCOL the pickle protocol (torch.save's default 2; 4 adds frames, memoize and stack globals)
       torch_ckpt.py hostile SRC OUT MARK
    one directory per hostile checkpoint under OUT (SRC's config and tokenizer beside each), named for
    what it tries (see hostile()); those that would run code try to create the file MARK.
"""
import collections
import json
import os
import pickle
import shutil
import struct
import sys
import zipfile

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "BOOL": np.bool_, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = collections.OrderedDict()
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        if e["dtype"] == "BF16":
            u = np.frombuffer(data[8 + n + b:8 + n + en], dtype="<u2").astype(np.uint32) << 16
            t = torch.from_numpy(u.view(np.float32).reshape(e["shape"]).copy()).to(torch.bfloat16)
        else:
            a = np.frombuffer(data[8 + n + b:8 + n + en], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
            t = torch.from_numpy(a.copy())
        out[name] = t
    return out


def copy_side_files(src, out):
    os.makedirs(out, exist_ok=True)
    for f in ("config.json", "vocab.json", "merges.txt"):
        shutil.copy(os.path.join(src, f), out)


def strided(sd):
    """the same values, held as PyTorch holds views: transposed matrices, vectors sharing storages"""
    out, groups = collections.OrderedDict(), collections.OrderedDict()
    for name, t in sd.items():
        out[name] = t
        if t.dim() == 2 and name.endswith("wpe.weight"):
            big = torch.zeros((t.shape[0] + 3, t.shape[1]), dtype=t.dtype)
            big[3:] = t
            out[name] = big[3:]
        elif t.dim() == 2:
            out[name] = t.t().contiguous().t()
        elif t.dim() == 1:
            parts = name.split(".")
            groups.setdefault(".".join(parts[:2]) if parts[0] == "h" else "top", []).append(name)
    for names in groups.values():
        big = torch.cat([torch.zeros(5, dtype=sd[names[0]].dtype)] + [sd[n] for n in names])
        at = 5
        for n in names:
            out[n] = big[at:at + sd[n].numel()]
            at += sd[n].numel()
    return out


def write_variant(src, out, fmt, head, layout, prefix, protocol="2"):
    sd = read_safetensors(os.path.join(src, "model.safetensors"))
    if layout == "strided":
        sd = strided(sd)
    named = collections.OrderedDict()
    for name, t in sd.items():
        bare = name.removeprefix("transformer.")
        named[("transformer." + bare) if prefix == "prefix" else bare] = t
    wte = named["transformer.wte.weight" if prefix == "prefix" else "wte.weight"]
    if head == "tied":
        named["lm_head.weight"] = wte
    elif head == "separate":
        named["lm_head.weight"] = wte.clone()
    # as Module.state_dict() leaves it: module versions as an attribute, pickled with BUILD
    named._metadata = collections.OrderedDict([("", {"version": 1}), ("transformer", {"version": 1})])
    copy_side_files(src, out)
    torch.save(named, os.path.join(out, "pytorch_model.bin"), _use_new_zipfile_serialization=(fmt == "zip"),
               pickle_protocol=int(protocol))


# ---- hostile checkpoints: pickles written by hand-made objects, never by torch ----

class Storage:
    def __init__(self, key, numel, kind=torch.FloatStorage):
        self.key, self.numel, self.kind = key, numel, kind


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride, False, collections.OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.kind, obj.key, "cpu", obj.numel)
        return None


def dumps(obj):
    import io
    f = io.BytesIO()
    Pickler(f, protocol=2).dump(obj)
    return f.getvalue()


def write_zip(path, pkl, storages, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compress) as z:
        z.writestr("archive/data.pkl", pkl)
        for key, data in storages.items():
            z.writestr("archive/data/" + key, data)
        z.writestr("archive/version", "3\n")


def write_legacy(path, pkl, keys, storages):
    with open(path, "wb") as f:
        f.write(pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2))
        f.write(pickle.dumps(1001, protocol=2))
        f.write(pickle.dumps({"protocol_version": 1001, "little_endian": True,
                              "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2))
        f.write(pkl)
        f.write(pickle.dumps(keys, protocol=2))
        for key in keys:
            f.write(storages[key])


def hostile(src, root, mark):
    def one(name):
        d = os.path.join(root, name)
        copy_side_files(src, d)
        return os.path.join(d, "pytorch_model.bin")

    def state(**entries):
        return dumps(collections.OrderedDict(entries))

    shell = "touch " + mark
    write_zip(one("os-system"), state(wte=Call(os.system, shell)), {})
    write_legacy(one("eval"), state(wte=Call(eval, "__import__('os').system(%r)" % shell)), [], {})
    write_zip(one("numpy-array"), dumps(collections.OrderedDict(wte=np.zeros(4, np.float32))), {})
    write_zip(one("exec-in-storage-type"), dumps(collections.OrderedDict(
        wte=Tensor(Storage("0", 4, exec), 0, (4,), (1,)))), {"0": b"\0" * 16})
    s = Storage("0", 10)
    write_zip(one("short-storage"), state(wte=Tensor(s, 0, (100,), (1,))), {"0": b"\0" * 40})
    write_zip(one("offset-past-storage"), state(wte=Tensor(s, 8, (2, 2), (2, 1))), {"0": b"\0" * 40})
    write_zip(one("entry-smaller-than-storage"), state(wte=Tensor(Storage("0", 100), 0, (10,), (1,))),
              {"0": b"\0" * 40})
    write_zip(one("overlapping-strides"), state(wte=Tensor(s, 0, (1 << 30, 4), (0, 1))), {"0": b"\0" * 40})
    write_zip(one("absurd-shape"), state(wte=Tensor(s, 0, (1 << 40, 1 << 40, 1 << 40), (1, 1, 1))),
              {"0": b"\0" * 40})
    write_zip(one("absurd-numel"), state(wte=Tensor(Storage("0", 1 << 62), 0, (1,), (1,))), {"0": b"\0" * 40})
    write_zip(one("missing-storage"), state(wte=Tensor(Storage("7", 10), 0, (10,), (1,))), {})
    deep = 200000
    write_zip(one("deep-nesting"), b"\x80\x02" + b"]" * deep + b"a" * (deep - 1) + b".", {})
    write_zip(one("mark-flood"), b"\x80\x02" + b"(" * 1000000 + b".", {})
    write_zip(one("memo-absurd"), b"\x80\x02}r\xff\xff\xff\x7f.", {})
    n = 64 << 20
    write_zip(one("zip-bomb"), state(wte=Tensor(Storage("0", n // 4), 0, (n // 4,), (1,))), {"0": b"\0" * n},
              zipfile.ZIP_DEFLATED)
    good = os.path.join(root, "good-zip")
    write_variant(src, good, "zip", "tied", "plain", "bare")
    data = open(os.path.join(good, "pytorch_model.bin"), "rb").read()
    open(one("truncated-zip"), "wb").write(data[:len(data) * 6 // 10])
    good = os.path.join(root, "good-legacy")
    write_variant(src, good, "legacy", "tied", "plain", "bare")
    data = open(os.path.join(good, "pytorch_model.bin"), "rb").read()
    open(one("truncated-legacy"), "wb").write(data[:len(data) * 6 // 10])
    open(one("not-pytorch"), "wb").write(b"this is not a checkpoint\n" * 10)
    open(one("empty"), "wb").close()


def main():
    if sys.argv[1] == "hostile":
        hostile(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        write_variant(*sys.argv[1:])


if __name__ == "__main__":
    main()
