#!/usr/bin/env python3
"""Write quantization fixtures from ggml's own reference quantizers.

Compiles quant/scripts/ggml_quant_harness.c against a ggml checkout (GGML_SRC, the root of
github.com/ggml-org/ggml, which holds include/ and src/ggml-quants.c), quantizes a fixed set
of test rows with `quantize_row_*_ref` one row at a time, and writes:

    quant/tests/fixtures/quant_input.bin   b"VKQI" | u32 n_rows | u32 row_len | f32 data
    quant/tests/fixtures/quant_<type>.bin  ggml's bytes for every row, concatenated

The Rust test quant/tests/ggml_quantize.rs compares vkml-quant's quantizers against them.

Usage: GGML_SRC=/path/to/ggml python3 quant/scripts/make_quant_fixtures.py
Committed fixtures were made from ggml-org/ggml d99724f2b141fed9e1a9f402213506c081433465.
"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures")
SRC = os.environ.get("GGML_SRC") or sys.exit("set GGML_SRC to a ggml checkout")
TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
         "q8_k", "tq1_0", "tq2_0", "mxfp4", "nvfp4", "q1_0", "q2_0", "iq4_nl", "iq4_xs"]
ROW = 512

rng = np.random.default_rng(424242)
rows = []
for scale in (1.0, 1e-3, 37.5, 1e-6, 3e3):
    for _ in range(8):
        rows.append(rng.standard_normal(ROW) * scale)
    rows.append(rng.uniform(-scale, scale, ROW))
    rows.append(np.abs(rng.uniform(-scale, scale, ROW)) + 0.01 * scale)
    rows.append(-np.abs(rng.uniform(-scale, scale, ROW)) - 0.01 * scale)
rows.append(np.zeros(ROW))
rows.append(np.ones(ROW))
rows.append(np.full(ROW, -2.5))
for pos in (0, 7, ROW // 2 + 3, ROW - 1):
    r = rng.standard_normal(ROW) * 0.01
    r[pos] = 100.0
    rows.append(r.copy())
    r[pos] = -100.0
    rows.append(r)
r = np.zeros(ROW)
r[5] = 0.75
rows.append(r)
rows.append(rng.standard_normal(ROW) * 6.0e4)
rows.append(rng.standard_normal(ROW) * 1e-30)
rows.append(np.where(np.arange(ROW) % 2 == 0, 1e-8, -3e4))
rows.append(rng.standard_normal(ROW) * np.where((np.arange(ROW) // 16) % 3 == 0, 1e-4, 10.0))
# values on exact rounding ties of the 4-bit grids
rows.append(np.tile(np.array([8.0, -0.5, 1.5, 2.5, -3.5, 4.5, -5.5, 6.5], dtype=np.float64), ROW // 8))
data = np.array(rows, dtype=np.float32)

with tempfile.TemporaryDirectory() as tmp:
    exe = os.path.join(tmp, "harness")
    subprocess.run(["gcc", "-O1", "-std=gnu11", "-ffp-contract=off", "-I", os.path.join(SRC, "include"),
                    "-I", os.path.join(SRC, "src"), os.path.join(HERE, "ggml_quant_harness.c"),
                    os.path.join(SRC, "src", "ggml-quants.c"), "-o", exe, "-lm"], check=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "quant_input.bin"), "wb") as f:
        f.write(b"VKQI" + struct.pack("<II", data.shape[0], ROW) + data.astype("<f4").tobytes())
    for t in TYPES:
        res = subprocess.run([exe, t, str(ROW)], input=data.astype("<f4").tobytes(), capture_output=True, check=True)
        with open(os.path.join(OUT, f"quant_{t}.bin"), "wb") as f:
            f.write(res.stdout)
        print(f"{t:7s} {len(res.stdout)} bytes")
