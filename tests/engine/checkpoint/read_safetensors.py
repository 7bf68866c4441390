#!/usr/bin/env python3
"""An independent, stdlib-only reader of .safetensors files, used by the
checkpoint tests: parses the header, checks every tensor's dtype, shape and
byte range, and compares the data with reference files.

usage: read_safetensors.py FILE REFDIR
REFDIR holds, per tensor, <name>.ref (the expected raw bytes) and
<name>.meta ("dtype ndim d0 d1 ...").
"""
import json
import os
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def main():
    path, refdir = sys.argv[1], sys.argv[2]
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = blob[8 + hlen:]
    header.pop("__metadata__", None)
    refs = sorted(n[:-4] for n in os.listdir(refdir) if n.endswith(".ref"))
    if sorted(header) != refs:
        print(f"tensor names differ: file {sorted(header)} reference {refs}")
        return 1
    end_max = 0
    for name, t in header.items():
        with open(os.path.join(refdir, name + ".meta")) as f:
            meta = f.read().split()
        want_dtype, want_shape = meta[0], [int(x) for x in meta[2:]]
        begin, end = t["data_offsets"]
        numel = 1
        for d in t["shape"]:
            numel *= d
        if t["dtype"] != want_dtype or t["shape"] != want_shape:
            print(f"{name}: dtype/shape {t['dtype']} {t['shape']}, expected {want_dtype} {want_shape}")
            return 1
        if end - begin != numel * SIZES[t["dtype"]]:
            print(f"{name}: byte range {begin}..{end} does not hold {numel} {t['dtype']}")
            return 1
        with open(os.path.join(refdir, name + ".ref"), "rb") as f:
            ref = f.read()
        got = data[begin:end]
        if got != ref:
            bad = next(i for i in range(len(ref)) if got[i] != ref[i])
            print(f"{name}: bytes differ from the reference at byte {bad}")
            return 1
        if t["dtype"] == "F16":  # decode a value through struct to prove the format
            struct.unpack("<e", got[:2])
        end_max = max(end_max, end)
    if end_max != len(data):
        print(f"data area is {len(data)} bytes, tensors end at {end_max}")
        return 1
    print(f"safetensors ok: {len(header)} tensors, {len(data)} data bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
