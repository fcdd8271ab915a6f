"""Reads a GGUF file with gguf-py's GGUFReader and prints what cli/tests/gguf_synth.rs checks, as JSON.

Usage: python3 gguf_py_read.py FILE   (with gguf-py on PYTHONPATH; scripts/setup.sh --test installs it)

Prints: gguf-py's version and location; every metadata field (scalars and strings as their value,
arrays as {"len": N} plus, for tokenizer.ggml.tokens, the first 300 and last token, and for
tokenizer.ggml.token_type, the count of each type); every tensor's name, type name, shape as
gguf-py reports it, element and byte counts; and, for the first and last tensor, the first and
last 8 values of their first and last rows, dequantized by gguf-py.
"""
import collections
import json
import sys
from importlib.metadata import version

import gguf
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize

r = GGUFReader(sys.argv[1])
fields = {}
for name, f in r.fields.items():
    if name.startswith("GGUF."):
        continue  # the reader's own header pseudo-fields
    if f.types and f.types[0] == GGUFValueType.ARRAY:
        v = {"len": len(f.data)}
        if name == "tokenizer.ggml.tokens":
            v["head"] = f.contents(slice(0, 300))
            v["last"] = f.contents(-1)
        if name == "tokenizer.ggml.token_type":
            v["counts"] = {str(k): n for k, n in sorted(collections.Counter(f.contents()).items())}
        if name == "tokenizer.ggml.scores":
            s = f.contents()
            v["decreasing"] = all(b < a for a, b in zip(s, s[1:]))
        fields[name] = v
    else:
        fields[name] = f.contents()


def rows(t):
    first = dequantize(t.data[:1], t.tensor_type).reshape(-1)
    last = dequantize(t.data[-1:], t.tensor_type).reshape(-1)
    return {"first": [float(x) for x in [*first[:8], *first[-8:]]],
            "last": [float(x) for x in [*last[:8], *last[-8:]]]}


print(json.dumps({
    "gguf_py": version("gguf"),
    "gguf_py_file": gguf.__file__,
    "fields": fields,
    "tensors": [
        {"name": t.name, "type": t.tensor_type.name, "shape": [int(d) for d in t.shape],
         "n_elements": int(t.n_elements), "n_bytes": int(t.n_bytes)}
        for t in r.tensors
    ],
    "samples": {t.name: rows(t) for t in (r.tensors[0], r.tensors[-1])},
}))
