#!/usr/bin/env bash
# README command 1: sets up (installs the Vulkan loader and lavapipe where missing),
# builds vkml in release mode and runs the main job. Until `vkml generate` lands
# (issue 5) the main job is `vkml info`: every Vulkan device and what it can do.
# Extra arguments are passed to `vkml`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -p vkml
if [[ $# -eq 0 ]]; then set -- info; fi
exec target/release/vkml "$@"
