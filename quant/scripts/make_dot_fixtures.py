#!/usr/bin/env python3
"""Write dot-product fixtures from ggml's own scalar `ggml_vec_dot_*_generic`.

Compiles quant/scripts/ggml_dot_harness.c with ggml's src/ggml-cpu/quants.c and
src/ggml-quants.c (GGML_SRC = root of a ggml-org/ggml checkout). For each type, the x rows are
the committed fixture blocks (quant_<type>.bin from make_quant_fixtures.py, or for i-quants the
random blocks of <type>.bin from make_fixtures.py), the activations for row r are row (r + 1)
of quant_input.bin, quantized by ggml to the type's vec_dot_type (Q8_0 / Q8_1 / Q8_K).
Writes quant/tests/fixtures/dot_<type>.bin: one little-endian f32 per row.

Usage: GGML_SRC=/path/to/ggml python3 quant/scripts/make_dot_fixtures.py
Committed fixtures were made from ggml-org/ggml d99724f2b141fed9e1a9f402213506c081433465.
"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")
SRC = os.environ.get("GGML_SRC") or sys.exit("set GGML_SRC to a ggml checkout")
ROW = 512
FROM_QUANT = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4", "nvfp4", "q1_0", "q2_0", "iq4_nl",
              "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "tq1_0", "tq2_0", "iq4_xs"]
FROM_DEQ = ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"]

with open(os.path.join(FIX, "quant_input.bin"), "rb") as f:
    b = f.read()
assert b[:4] == b"VKQI"
n_rows, row_len = struct.unpack("<II", b[4:12])
assert row_len == ROW
inp = np.frombuffer(b[12:], dtype="<f4").reshape(n_rows, ROW)
act = np.roll(inp, -1, axis=0)  # row r -> input row r + 1

with tempfile.TemporaryDirectory() as tmp:
    exe = os.path.join(tmp, "harness")
    subprocess.run(["gcc", "-O1", "-std=gnu11", "-ffp-contract=off", "-I", os.path.join(SRC, "include"),
                    "-I", os.path.join(SRC, "src"), "-I", os.path.join(SRC, "src", "ggml-cpu"),
                    os.path.join(HERE, "ggml_dot_harness.c"), os.path.join(SRC, "src", "ggml-cpu", "quants.c"),
                    os.path.join(SRC, "src", "ggml-quants.c"), "-o", exe, "-lm"], check=True)
    act_path = os.path.join(tmp, "act.f32")
    act.astype("<f4").tofile(act_path)
    for t in FROM_QUANT + FROM_DEQ:
        if t in FROM_QUANT:
            x_path = os.path.join(FIX, f"quant_{t}.bin")
        else:
            with open(os.path.join(FIX, f"{t}.bin"), "rb") as f:
                d = f.read()
            _, n_blocks, n_elems = struct.unpack("<III", d[4:16])
            ts = (len(d) - 16 - 4 * n_elems) // n_blocks
            x_path = os.path.join(tmp, f"{t}.x")
            with open(x_path, "wb") as f:
                f.write(d[16:16 + n_blocks * ts])
        res = subprocess.run([exe, t, str(ROW), x_path, act_path], capture_output=True, check=True)
        with open(os.path.join(FIX, f"dot_{t}.bin"), "wb") as f:
            f.write(res.stdout)
        print(f"{t:8s} {len(res.stdout) // 4} rows")
