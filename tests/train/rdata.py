"""Reads the character vectors of an R package's lazy-load database (data/Rdata.rdx + .rdb):
zlib blobs of XDR-serialised R objects. Only what janeaustenr's data needs: character vectors,
and the lists and pairlists that index them. No R needed."""
import gzip
import struct
import zlib

NIL, SYM, LIST, CHAR, LGL, INT, REAL, STR, VEC, REF = 254, 1, 2, 9, 10, 13, 14, 16, 19, 255
NILVALUE_KINDS = {242, 251, 252, 253, 254}  # empty env, unbound, missing arg, base namespace, NULL


class _Reader:
    def __init__(self, data):
        self.d, self.i, self.refs = data, 0, []

    def int(self):
        (v,) = struct.unpack_from(">i", self.d, self.i)
        self.i += 4
        return v

    def header(self):
        if self.d[:2] != b"X\n":
            raise ValueError("not an XDR R serialisation")
        self.i = 2
        version = self.int()
        self.int(), self.int()
        if version == 3:
            n = self.int()  # the native encoding's name
            self.i += n

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in NILVALUE_KINDS:
            return None
        if kind == REF:
            k = flags >> 8
            return self.refs[(k or self.int()) - 1]
        if kind == SYM:
            name = self.item()
            self.refs.append(name)
            return name
        if kind == LIST:  # a pairlist: attributes, tag, value, then the rest
            out = {}
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out[tag if tag is not None else len(out)] = self.item()
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
                if kind in NILVALUE_KINDS:
                    return out
                if kind != LIST:
                    raise ValueError("a pairlist ends in type %d" % kind)
        if kind == CHAR:
            n = self.int()
            if n < 0:
                return None
            s = self.d[self.i : self.i + n].decode("utf-8", "replace")
            self.i += n
            return s
        n = self.int()
        if kind == STR:
            v = [self.item() for _ in range(n)]
        elif kind == VEC:
            v = [self.item() for _ in range(n)]
        elif kind in (INT, LGL):
            v = list(struct.unpack_from(">%di" % n, self.d, self.i))
            self.i += 4 * n
        elif kind == REAL:
            v = list(struct.unpack_from(">%dd" % n, self.d, self.i))
            self.i += 8 * n
        else:
            raise ValueError("R type %d is not read here" % kind)
        attrs = self.item() if has_attr else None
        if kind == VEC and attrs and "names" in attrs:
            return dict(zip(attrs["names"], v))
        return v


def _unserialise(data):
    r = _Reader(data)
    r.header()
    return r.item()


def _blob(blob):
    """a database entry: its length (4 bytes, big-endian), then zlib"""
    (n,) = struct.unpack_from(">i", blob, 0)
    data = zlib.decompress(blob[4:])
    if len(data) != n:
        raise ValueError("a blob of %d bytes, its header says %d" % (len(data), n))
    return _unserialise(data)


def read_lazyload(base):
    """{name: object} of BASE.rdx / BASE.rdb"""
    with open(base + ".rdx", "rb") as f:  # the index: the whole file gzip'd
        index = _unserialise(gzip.decompress(f.read()))
    with open(base + ".rdb", "rb") as f:
        db = f.read()
    out = {}
    for name, (offset, length) in index["variables"].items():
        out[name] = _blob(db[int(offset) : int(offset) + int(length)])
    return out
