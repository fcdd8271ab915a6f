#!/usr/bin/env python3
"""Reference token ids for the SentencePiece ("llama") path of GgufTokenizer, from Google's
own `sentencepiece` library.

Usage:
    pip install sentencepiece gguf protobuf
    python3 models/scripts/spm_reference.py [PATH/TO/gemma-3-270m-q4_k_m.gguf]

The GGUF defaults to $VKML_TEST_MODELS/gemma-3-270m-q4_k_m.gguf (VKML_TEST_MODELS defaults
to ~/.cache/vkml/test-models; quant/scripts/fetch_test_models.sh downloads it). Writes
models/tests/data/gemma3_spm_reference.json:
    {"source": "...", "cases": [{"text": ..., "ids": [...]}, ...]}
ids without BOS; `decodes` is false where sentencepiece's own decode of the ids does not give
the text back (none of the committed cases).

How the SentencePiece model is rebuilt from the GGUF metadata (tokenizer.ggml.*), as close
to Gemma 3's own tokenizer.model as the GGUF allows:
- pieces and scores: tokenizer.ggml.tokens / .scores, in id order;
- piece types from tokenizer.ggml.token_type (llama.cpp's LLAMA_TOKEN_TYPE: 1 normal,
  2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte) to SentencePiece's
  (NORMAL=1, UNKNOWN=2, CONTROL=3, USER_DEFINED=4, UNUSED=5, BYTE=6); the piece at
  tokenizer.ggml.unknown_token_id is UNKNOWN (llama.cpp's converter writes Gemma's <unk>
  as control, because tokenizer_config.json marks it special, but a SentencePiece model
  needs its one UNKNOWN piece);
- user-defined pieces get their '▁' back: llama.cpp's convert_hf_to_gguf.py writes them
  with '▁' replaced by ' ' ("pre-normalize user-defined spaces", added for Gemma), so
  Gemma's "▁▁" ... pieces (ids 138-167) are "  " ... in the GGUF;
- trainer_spec: model_type BPE, byte_fallback true, unk/bos/eos/pad ids from the GGUF;
- normalizer_spec as Gemma's tokenizer.model: name "identity" (no precompiled charsmap),
  add_dummy_prefix = tokenizer.ggml.add_space_prefix (false for Gemma 3),
  remove_extra_whitespaces false, escape_whitespaces true.

Known difference, kept out of the fixture: CONTROL pieces (<bos>, <start_of_turn>,
<end_of_turn>, <unusedN>, ...) are never matched in raw text by sentencepiece (it spells
them out character by character), while GgufTokenizer, like llama.cpp with parse_special,
matches them whole. USER_DEFINED pieces (<b>, "\\n\\n", runs of spaces and tabs) are matched
whole by both, so texts with those are in the fixture.
"""
import hashlib
import json
import os
import sys
from importlib.metadata import version

import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "gemma3_spm_reference.json")
MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"

# Fixed test texts. None contains the text of a CONTROL piece (see the module docstring).
TEXTS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "multiple   spaces    between     words",
    " ",
    "   ",
    "line one\nline two\n\nline four\n",
    "\n\n\nthree newlines first",
    "tabs\there\t\tand\t\t\tthere",
    "\t indented \t mixed \n whitespace \r\n windows line end",
    "1234567890",
    "The year 2026 has 365 days; pi is 3.14159265358979.",
    "Call +1 (555) 010-9999 or mail x@example.com!",
    "Punctuation: !?.,;:'\"()[]{}<>-_=+*/\\|@#$%^&~`",
    "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "<b>bold</b> and <code>x = 1</code> in <table><tr><td>html</td></tr></table>",
    "Café, naïve, résumé, façade, Ångström, Straße, Ünïcödé",
    "日本語のテキストを分割します。",
    "中文分词测试：你好，世界！",
    "한국어 문장입니다.",
    "Русский текст и ελληνικά γράμματα",
    "مرحبا بالعالم and שלום עולם",
    "हिन्दी और ภาษาไทย",
    "emoji 🦀🚀 and a family 👨‍👩‍👧‍👦 and flags 🇯🇵",
    "private use \ue000\U0010fffd needs byte fallback",
    "\U0010fffd",
    "mixed: English, 日本語, Ελληνικά, 123, 🦀, and ‰ ∑ ∞ ≈ ≠",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "URL: https://github.com/google/sentencepiece/blob/master/README.md?x=1&y=2#top",
]

GGUF_TO_SPM = {
    1: pb.ModelProto.SentencePiece.NORMAL,
    2: pb.ModelProto.SentencePiece.UNKNOWN,
    3: pb.ModelProto.SentencePiece.CONTROL,
    4: pb.ModelProto.SentencePiece.USER_DEFINED,
    5: pb.ModelProto.SentencePiece.UNUSED,
    6: pb.ModelProto.SentencePiece.BYTE,
}


def field(r, key, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.environ.get("VKML_TEST_MODELS", os.path.expanduser("~/.cache/vkml/test-models")), MODEL_NAME)
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    sha = h.hexdigest()

    r = gguf.GGUFReader(path)
    assert field(r, "tokenizer.ggml.model") == "llama", "not a SentencePiece (llama) tokenizer"
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    assert len(tokens) == len(scores) == len(types)
    unk = field(r, "tokenizer.ggml.unknown_token_id")
    bos = field(r, "tokenizer.ggml.bos_token_id")
    eos = field(r, "tokenizer.ggml.eos_token_id")
    pad = field(r, "tokenizer.ggml.padding_token_id")
    add_space_prefix = bool(field(r, "tokenizer.ggml.add_space_prefix", True))

    m = pb.ModelProto()
    seen = set()
    for i, (t, s, ty) in enumerate(zip(tokens, scores, types)):
        p = m.pieces.add()
        kind = pb.ModelProto.SentencePiece.UNKNOWN if i == unk else GGUF_TO_SPM[int(ty)]
        if kind == pb.ModelProto.SentencePiece.USER_DEFINED:
            t = t.replace(" ", "\u2581")
        assert t and t not in seen, f"piece {i} {t!r} is empty or repeated"
        seen.add(t)
        p.piece, p.score, p.type = t, float(s), kind
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = True
    ts.unk_id = -1 if unk is None else int(unk)
    ts.bos_id = -1 if bos is None else int(bos)
    ts.eos_id = -1 if eos is None else int(eos)
    ts.pad_id = -1 if pad is None else int(pad)
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = add_space_prefix
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True

    sp = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    assert sp.get_piece_size() == len(tokens)
    control = [t for t, ty in zip(tokens, types) if int(ty) == 3]
    cases = []
    for text in TEXTS:
        assert not any(c in text for c in control), f"{text!r} contains a control piece"
        ids = sp.encode(text, out_type=int)
        case = {"text": text, "ids": ids}
        if sp.decode(ids) != text:
            case["decodes"] = False
        cases.append(case)
    source = (
        f"models/scripts/spm_reference.py: sentencepiece {spm.__version__} "
        f"SentencePieceProcessor (BPE, byte fallback, identity normalizer, "
        f"add_dummy_prefix {str(add_space_prefix).lower()}) rebuilt from the tokenizer.ggml.* "
        f"metadata of {os.path.basename(path)} (sha256 {sha}), read with gguf-py {version('gguf')}"
    )
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as fh:
        # One case a line.
        fh.write('{"source": ' + json.dumps(source) + ',\n "cases": [\n')
        fh.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
        fh.write("\n ]}\n")
    print(f"wrote {len(cases)} cases to {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
