#!/usr/bin/env bash
# Installs everything libacc needs on a fresh Debian 12 machine, then configures the build.
# Idempotent: a second run checks and returns in seconds.
#   Debian packages: meson, ninja, cJSON, yaml-cpp, CLI11, Gloo headers, GoogleTest, SWIG, abigail-tools.
#   .venv/: the PyPI torch wheel (LibTorch headers and libraries) with only the CUDA runtime pieces
#           libtorch_cpu.so needs to load (cudart, cupti), and nvidia-nccl-cu13 for NCCL headers.
# Set LIBTORCH=/path/to/libtorch to build against an official LibTorch instead of the wheel.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

debs=(meson ninja-build pkg-config g++ python3-venv libcjson-dev libyaml-cpp-dev libcli11-dev
      libgloo-dev libgtest-dev swig abigail-tools ccache)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python environment holding the torch wheel. Pinned; the stamp records what was installed.
torch_pin="torch==2.15.0"
cuda_pins=("cuda-toolkit[cudart,cupti]==13.2.2" "nvidia-nccl-cu13==2.30.7")
stamp=".venv/.acc-setup-$(echo "$torch_pin ${cuda_pins[*]}" | md5sum | cut -c1-12)"
if [[ -z ${LIBTORCH:-} && ! -f $stamp ]]; then
  echo "setup: creating .venv with $torch_pin (LibTorch from the PyPI wheel)"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip >/dev/null
  # --no-deps: the full CUDA stack is only needed on GPU machines; libtorch_cpu.so needs cudart and cupti.
  .venv/bin/pip install -q --no-warn-conflicts --no-deps "$torch_pin"
  .venv/bin/pip install -q --no-warn-conflicts "${cuda_pins[@]}"
  touch "$stamp"
fi

if [[ ! -f build/build.ninja ]]; then
  opts=()
  [[ -n ${LIBTORCH:-} ]] && opts+=("-Dlibtorch=$LIBTORCH")
  meson setup build --buildtype=release "${opts[@]}"
fi
