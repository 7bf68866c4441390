#!/usr/bin/env python3
"""Write the pretrained-weights fixtures of test_load_weights.c with Python's
`safetensors` package (PyPI; scripts/setup.sh installs it into .venv):

  fixtures/pretrained.safetensors     tensors named as a Hugging Face GPT-2
                                      file names them (F32, BF16, F16, and an
                                      I64 buffer no parameter takes)
  fixtures/pretrained_expected.txt    per zinc parameter, the f32 bits each
                                      element must hold after the load:
                                      the file's value rounded to the
                                      parameter's dtype, computed here

The values are chosen so that rounding matters (ties to even included). The
files are committed; the test does not need PyPI. Run:
  .venv/bin/python3 tests/engine/checkpoint/make_pretrained.py
"""
import ctypes
import os
import struct
import sys

try:
    from safetensors import TensorSpec, serialize_file
except ImportError:
    sys.exit("make_pretrained.py: the safetensors package is missing; run scripts/setup.sh")

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def bf16_round(x):
    """bits of x (an f32 value) rounded to bfloat16, to nearest, ties to even"""
    b = f32_bits(x)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]  # IEEE round to nearest even


def value(k, j):
    """an f32 value that bf16 and f16 must round (k: the tensor)"""
    sign = -1.0 if j % 2 else 1.0
    return bits_f32(f32_bits(sign * (1.0 + j * 2.0**-10) * 2.0 ** ((j + k) % 5 - 2)))


# (file name, file dtype, shape, zinc name, zinc dtype)
TENSORS = [
    ("transformer.wte.weight", "F32", [8, 4], "embed.weight", "BF16"),
    ("transformer.h.0.attn.weight", "BF16", [4, 4], "h0.attn", "F32"),
    ("transformer.h.0.mlp.weight", "F16", [4, 6], "h0.mlp", "F32"),
    ("transformer.h.0.proj.weight", "F32", [6, 4], "h0.proj", "F16"),
    ("transformer.h.0.mlp.bias", "F32", [6], "h0.bias", "F32"),
    ("transformer.h.0.attn.masked_bias", "I64", [1], None, None),
    ("lm_head.extra", "F32", [3], None, None),
]

SPEC_DTYPE = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "I64": "int64"}


def main():
    os.makedirs(HERE, exist_ok=True)
    specs, keep, expected = {}, [], []
    for k, (name, dt, shape, zname, zdt) in enumerate(TENSORS):
        n = 1
        for d in shape:
            n *= d
        if dt == "F32":
            vals = [value(k, j) for j in range(n)]
            raw = b"".join(struct.pack("<f", v) for v in vals)
        elif dt == "BF16":
            hb = [bf16_round(value(k, j)) for j in range(n)]
            vals = [bits_f32(h << 16) for h in hb]
            raw = b"".join(struct.pack("<H", h) for h in hb)
        elif dt == "F16":
            hb = [f16_bits(value(k, j)) for j in range(n)]
            vals = [struct.unpack("<e", struct.pack("<H", h))[0] for h in hb]
            raw = b"".join(struct.pack("<H", h) for h in hb)
        else:
            vals, raw = None, struct.pack("<q", -10000) * n
        buf = ctypes.create_string_buffer(raw, len(raw))
        keep.append(buf)
        specs[name] = TensorSpec(dtype=SPEC_DTYPE[dt], shape=shape, data_ptr=ctypes.addressof(buf),
                                  data_len=len(raw))
        if zname:
            if zdt == "BF16":
                bits = [bf16_round(v) << 16 for v in vals]
            elif zdt == "F16":
                bits = [f32_bits(struct.unpack("<e", struct.pack("<e", v))[0]) for v in vals]
            else:
                bits = [f32_bits(v) for v in vals]
            expected.append(zname + " " + " ".join("%08x" % b for b in bits))
    serialize_file(specs, os.path.join(HERE, "pretrained.safetensors"),
                   metadata={"format": "pt"})
    with open(os.path.join(HERE, "pretrained_expected.txt"), "w") as f:
        f.write("\n".join(expected) + "\n")


if __name__ == "__main__":
    main()
