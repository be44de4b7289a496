"""A GGUF file's metadata and tensor shapes read with the standard library only (no `gguf` package):
what the end-to-end roofline check (test_serve_openai.py) counts by hand, independently of mpkv's
reader. Format: github.com/ggml-org/ggml docs/gguf.md (version 2 and 3).
"""
import struct

# ggml type -> (elements per block, bytes per block), for the types a GGUF model commonly holds.
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, f):
        self.f = f

    def scalar(self, fmt):
        return struct.unpack(fmt, self.f.read(struct.calcsize(fmt)))[0]

    def string(self):
        return self.f.read(self.scalar("<Q")).decode("utf-8", "replace")

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, n = self.scalar("<I"), self.scalar("<Q")
            return [self.value(itype) for _ in range(n)]
        if vtype not in SCALARS:
            raise ValueError("GGUF value type %d unknown" % vtype)
        return self.scalar(SCALARS[vtype])


def read_gguf(path):
    """(metadata dict, {tensor name: (dims innermost first, ggml type, bytes)})."""
    with open(path, "rb") as f:
        r = _Reader(f)
        if f.read(4) != b"GGUF":
            raise ValueError("%s is not a GGUF file" % path)
        r.scalar("<I")  # version
        n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
        meta = {}
        for _ in range(n_kv):
            key = r.string()
            meta[key] = r.value(r.scalar("<I"))
        tensors = {}
        for _ in range(n_tensors):
            name = r.string()
            dims = [r.scalar("<Q") for _ in range(r.scalar("<I"))]
            ttype, _offset = r.scalar("<I"), r.scalar("<Q")
            if ttype not in BLOCKS:
                raise ValueError("tensor %s has ggml type %d, not in this reader's table" % (name, ttype))
            per_block, block_bytes = BLOCKS[ttype]
            n = 1
            for d in dims:
                n *= d
            tensors[name] = (dims, ttype, n // per_block * block_bytes)
    return meta, tensors
