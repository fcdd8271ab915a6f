#!/usr/bin/env bash
# Installs what vkml needs on a Debian/Ubuntu machine, only what is missing:
#   - a C/C++ compiler (glslang and VMA are built from source by cargo),
#   - the Vulkan loader (libvulkan1) and Mesa's Vulkan drivers, which include lavapipe,
#     the CPU implementation vkml runs on when there is no GPU,
#   - the system's root certificates (the default model is fetched over HTTPS),
#   - with --test: the Khronos validation layers (tests run with validation on) and
#     the real GGUF models the tests read (see quant/scripts/fetch_test_models.sh).
#   - with --test: gguf-py (pinned) in ~/.cache/vkml/gguf-py, the reader cli/tests/gguf_synth.rs checks,
#     and OpenAI's Python client (pinned) in ~/.cache/vkml/py-openai, which cli/tests/serve.rs
#     drives `vkml serve` with.
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
  command -v python3 >/dev/null || need_pkg python3
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
  # gguf-py with its dependencies (numpy, ...) in a directory of its own, put on PYTHONPATH
  # by the tests: `pip install --target` needs no venv and is allowed on PEP 668 ("externally
  # managed") systems. The marker names the version and the Python it was built for.
  gguf_py="${VKML_GGUF_PY:-$HOME/.cache/vkml/gguf-py}"
  gguf_version=0.19.0
  marker=".vkml-gguf-$gguf_version-$(python3 -c 'import sys; print(sys.implementation.cache_tag)')"
  if [[ ! -e "$gguf_py/$marker" ]]; then
    echo "setup: installing gguf-py $gguf_version into $gguf_py" >&2
    mkdir -p "$(dirname "$gguf_py")"
    rm -rf "$gguf_py.tmp"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
      --target "$gguf_py.tmp" "gguf==$gguf_version"
    touch "$gguf_py.tmp/$marker"
    rm -rf "$gguf_py"
    mv "$gguf_py.tmp" "$gguf_py"
  fi
  py_openai="${VKML_PY_OPENAI:-$HOME/.cache/vkml/py-openai}"
  openai_version=3.57.0
  marker=".vkml-openai-$openai_version-$(python3 -c 'import sys; print(sys.implementation.cache_tag)')"
  if [[ ! -e "$py_openai/$marker" ]]; then
    echo "setup: installing openai $openai_version into $py_openai" >&2
    mkdir -p "$(dirname "$py_openai")"
    rm -rf "$py_openai.tmp"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
      --target "$py_openai.tmp" "openai==$openai_version"
    touch "$py_openai.tmp/$marker"
    rm -rf "$py_openai"
    mv "$py_openai.tmp" "$py_openai"
  fi
fi
