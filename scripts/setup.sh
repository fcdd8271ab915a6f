#!/usr/bin/env bash
# Installs what vkml needs on a Debian/Ubuntu machine, only what is missing:
#   - a C/C++ compiler (glslang and VMA are built from source by cargo),
#   - the Vulkan loader (libvulkan1) and Mesa's Vulkan drivers, which include lavapipe,
#     the CPU implementation vkml runs on when there is no GPU,
#   - the system's root certificates (the default model is fetched over HTTPS),
#   - with --test: the Khronos validation layers (tests run with validation on) and
#     the real GGUF models the tests read (see quant/scripts/fetch_test_models.sh).
# Usage: scripts/setup.sh [--test]
set -euo pipefail

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "setup: need root (or sudo) to run: $*" >&2; exit 1; fi
}

pkgs=()
need_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" || pkgs+=("$1"); }
command -v g++ >/dev/null || need_pkg g++
command -v make >/dev/null || need_pkg make
need_pkg libvulkan1
need_pkg mesa-vulkan-drivers
need_pkg pkg-config
# The system's root certificates: `vkml generate` fetches its default model over HTTPS.
need_pkg ca-certificates
if [[ $want_test -eq 1 ]]; then
  need_pkg vulkan-validationlayers
  python3 -m pip --version >/dev/null 2>&1 || need_pkg python3-pip
fi
if [[ ${#pkgs[@]} -gt 0 ]]; then
  echo "setup: installing ${pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -q
  as_root apt-get install -y -q --no-install-recommends "${pkgs[@]}"
fi

if [[ $want_test -eq 1 ]]; then
  bash "$(dirname "$0")/../quant/scripts/fetch_test_models.sh"
fi
