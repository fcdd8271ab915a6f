#!/usr/bin/env python3
"""Write dequantization fixtures from gguf-py's reference dequantizers.

For every GGML type that gguf-py (pip package `gguf`) can dequantize, this writes
quant/tests/fixtures/<type>.bin containing random block bytes (with finite, moderate scale
fields so the expected values are finite) and the floats `gguf.quants.dequantize` produces
for them. The Rust tests (quant/tests/fixtures.rs) read these files and compare vkml-quant's
dequantizer against them.

File format (little-endian):
    b"VKQF" | u32 ggml type id | u32 n_blocks | u32 n_elements |
    n_blocks * type_size block bytes | n_elements * f32 values

Usage: python3 quant/scripts/make_fixtures.py [OUT_DIR]   (needs `pip install gguf numpy`)
Deterministic (fixed seed); re-running reproduces the committed files.
"""
import os
import struct
import sys

import numpy as np
import gguf
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
rng = np.random.default_rng(20261122)


def rand_f16(n, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, n).astype(np.float16)


def put_f16(block, off, value):
    block[off:off + 2] = np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)


# byte offsets of f16 scale fields inside each block (ggml-common.h layouts)
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ3_XXS: [0], T.IQ1_S: [0], T.IQ4_NL: [0],
    T.IQ3_S: [0], T.IQ2_S: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
}

TYPES = [
    T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K,
    T.Q5_K, T.Q6_K, T.IQ2_XXS, T.IQ2_XS, T.IQ3_XXS, T.IQ1_S, T.IQ4_NL, T.IQ3_S, T.IQ2_S,
    T.IQ4_XS, T.IQ1_M, T.TQ1_0, T.TQ2_0, T.MXFP4,
]
if hasattr(T, "NVFP4"):
    TYPES.append(T.NVFP4)


def make_blocks(t, n_blocks):
    bs, ts = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    if t == T.F32:
        return rng.uniform(-100, 100, n_blocks).astype(np.float32).view(np.uint8).reshape(n_blocks, ts)
    if t == T.F16:
        return rand_f16(n_blocks, -100, 100).view(np.uint8).reshape(n_blocks, ts)
    if t == T.BF16:
        f = rng.uniform(-100, 100, n_blocks).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, ts)
    # a few structured blocks: all-zero quants and all-ones quants
    if n_blocks > 2:
        raw[0, :] = 0
        raw[1, :] = 0xFF
    for b in range(n_blocks):
        for off in F16_FIELDS.get(t, []):
            put_f16(raw[b], off, rand_f16(1)[0])
        if t == T.IQ1_M:
            # the f16 super-block scale lives in the top nibbles of the 4 u16 scale words
            d = np.frombuffer(rand_f16(1).tobytes(), dtype=np.uint16)[0]
            for k in range(4):
                idx = 48 + 2 * k + 1
                raw[b, idx] = (raw[b, idx] & 0x0F) | (((int(d) >> (4 * k)) & 0xF) << 4)
        if t == T.MXFP4:
            raw[b, 0] = rng.integers(100, 150)
        if hasattr(T, "NVFP4") and t == T.NVFP4:
            raw[b, 0:4] = rng.integers(0, 0x7F, 4)
    return raw


os.makedirs(OUT, exist_ok=True)
total = 0
for t in TYPES:
    bs, ts = GGML_QUANT_SIZES[t]
    n_blocks = 64 if bs <= 32 else (32 if bs == 64 else 12)
    if bs == 1:
        n_blocks = 256
    blocks = make_blocks(t, n_blocks)
    vals = gguf.quants.dequantize(blocks.reshape(-1), t).astype(np.float32).reshape(-1)
    assert vals.size == n_blocks * bs, (t, vals.size)
    path = os.path.join(OUT, f"{t.name.lower()}.bin")
    with open(path, "wb") as f:
        f.write(b"VKQF")
        f.write(struct.pack("<III", int(t), n_blocks, n_blocks * bs))
        f.write(blocks.tobytes())
        f.write(vals.astype("<f4").tobytes())
    total += os.path.getsize(path)
    print(f"{t.name:8s} {n_blocks:4d} blocks -> {path}")
print(f"total {total} bytes (gguf-py {getattr(gguf, '__version__', '?')})")
