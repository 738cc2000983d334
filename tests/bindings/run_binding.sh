#!/usr/bin/env bash
# Builds and tests one binding against the libacc of a meson build tree (meson test suites 'rust',
# 'go', 'java'). Exit 77 (skipped) when the language's toolchain is missing; scripts/setup.sh
# installs the toolchains.
#   run_binding.sh rust|go|java SOURCE_ROOT BUILD_ROOT [LIBACC_JNI]
set -euo pipefail
lang=$1 src=$2 build=$3 jni=${4:-}
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
export PKG_CONFIG_PATH="$build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$build/src${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
need() { command -v "$1" >/dev/null || { echo "SKIP: $1 not found (run scripts/setup.sh)"; exit 77; }; }
# at_least HAVE WANT: version HAVE >= WANT (dotted numbers)
at_least() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1) == "$2" ]]; }

case $lang in
  rust)
    need cargo
    v=$(rustc --version | awk '{print $2}')
    at_least "$v" 1.77 || { echo "SKIP: rustc $v is older than 1.77 (install Rust with rustup)"; exit 77; }
    export CARGO_TARGET_DIR="$build/bindings/cargo"
    # No dependencies beyond the two crates: --offline holds from the first run on.
    cargo test --offline --workspace --manifest-path "$src/bindings/rust/Cargo.toml" 2>&1
    ;;
  go)
    need go
    v=$(go env GOVERSION | sed 's/^go//')
    at_least "$v" 1.24 || { echo "SKIP: Go $v is older than 1.24"; exit 77; }
    cd "$src/bindings/go"
    go test -count=1 ./... 2>&1
    ;;
  java)
    need mvn
    need java
    [[ -n $jni && -f $jni ]] || { echo "SKIP: libacc_jni was not built (no JNI headers?)"; exit 77; }
    out=$build/bindings/maven-test
    args=(-B -Dstyle.color=never -f "$src/bindings/java/pom.xml" "-Dacc.build.dir=$out" "-Dai.acc.native.path=$jni" test)
    # Offline once ~/.m2 holds the plugins and JUnit; the very first run fetches them.
    if ! mvn -o -q "${args[@]}" >"$build/bindings/maven-test.log" 2>&1; then
      if grep -q "offline mode\|has not been downloaded\|Cannot access .* in offline" "$build/bindings/maven-test.log"; then
        echo "maven: fetching plugins and JUnit into ~/.m2 (first run)"
        mvn -q "${args[@]}" 2>&1
      else
        cat "$build/bindings/maven-test.log"
        exit 1
      fi
    fi
    cat "$out"/surefire-reports/*.txt
    ;;
  *)
    echo "unknown binding $lang" >&2
    exit 2
    ;;
esac
