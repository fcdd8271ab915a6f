#!/usr/bin/env bash
# README command 2: sets up (compiler, Vulkan loader, lavapipe, validation layers, the
# test models) and runs every test of the workspace on lavapipe with the Khronos
# validation layer on; any validation error fails the test that caused it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
# Tests run on lavapipe, the device CI has; unset VK_DRIVER_FILES to test on a GPU.
export VK_DRIVER_FILES="${VK_DRIVER_FILES-/usr/share/vulkan/icd.d/lvp_icd.x86_64.json}"
export VKML_VALIDATION=1
export VKML_TEST_MODELS="${VKML_TEST_MODELS:-$HOME/.cache/vkml/test-models}"
# gguf-py, installed by setup.sh --test, for cli/tests/gguf_synth.rs.
export VKML_GGUF_PY="${VKML_GGUF_PY:-$HOME/.cache/vkml/gguf-py}"
# OpenAI's Python client, installed by setup.sh --test, for cli/tests/serve.rs.
export VKML_PY_OPENAI="${VKML_PY_OPENAI:-$HOME/.cache/vkml/py-openai}"
# Pipeline caches written by tests go to a scratch dir, not the user's cache.
export VKML_CACHE_DIR="${VKML_CACHE_DIR:-$(mktemp -d)}"
# Format, lints (warnings are errors; missing docs on public items are warnings, see the
# workspace lints) and docs (broken intra-doc links are errors), then the tests.
for c in rustfmt clippy; do
  cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$c"
done
cargo fmt --all --check
cargo clippy --workspace --all-targets --release -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --release
cargo test --workspace --release
# The examples, run (cargo test only builds them).
for ex in vkml-hal:custom_kernel vkml-candle:tensor_ops vkml-candle:mlp_block vkml-ops:quantized_matvec vkml-models:chat; do
  cargo run --release -q -p "${ex%%:*}" --example "${ex#*:}"
done
