#!/usr/bin/env bash
# The committed generated code matches its sources: SWIG output (Go raw package, Java JNI layer) for
# bindings/swig/acc.i + acc.h, and bindgen output (acc-sys/src/bindings.rs) for acc.h.
#   generated_fresh.sh swig|bindgen SOURCE_ROOT
# Exit 77 when the generator is not installed (SWIG comes with scripts/setup.sh; bindgen only on
# maintainers' machines, since users build from the checked-in file). Stale output fails, with the
# command that fixes it: whoever changes acc.h regenerates and commits the bindings with it.
stale() {
  echo "$1"
  exit 1
}
set -euo pipefail
kind=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
case $kind in
  swig)
    command -v swig >/dev/null || { echo "SKIP: swig not installed"; exit 77; }
    "$src/bindings/swig/generate.sh" "$tmp" >/dev/null
    status=0
    for f in bindings/go/internal/raw/raw.go bindings/go/internal/raw/raw_wrap.c bindings/java/native/acc_jni_wrap.c \
             $(cd "$tmp" && ls bindings/java/src/main/java/ai/acc/internal/*.java); do
      if ! diff -q "$tmp/$f" "$src/$f" >/dev/null 2>&1; then
        echo "STALE: $f (run bindings/swig/generate.sh)"
        diff -u "$src/$f" "$tmp/$f" | head -12 || true
        status=1
      fi
    done
    committed=$(cd "$src" && ls bindings/java/src/main/java/ai/acc/internal/*.java | wc -l)
    fresh=$(cd "$tmp" && ls bindings/java/src/main/java/ai/acc/internal/*.java | wc -l)
    [[ $committed == "$fresh" ]] || { echo "STALE: $committed committed Java files, $fresh generated"; status=1; }
    [[ $status == 0 ]] || stale "regenerate with: bindings/swig/generate.sh"
    echo "SWIG output is up to date"
    ;;
  bindgen)
    command -v bindgen >/dev/null || { echo "SKIP: bindgen not installed (maintainers only)"; exit 77; }
    ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || [[ -n ${LIBCLANG_PATH:-} ]] \
      || { echo "SKIP: libclang not installed (bindings/rust/regenerate.sh installs it)"; exit 77; }
    # Without clang's own headers (libclang-common-14-dev) regenerate.sh would install them: not in a test.
    ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1 || [[ -n ${LIBCLANG_PATH:-} ]] \
      || { echo "SKIP: clang's headers not installed (bindings/rust/regenerate.sh installs them)"; exit 77; }
    "$src/bindings/rust/regenerate.sh" "$tmp/bindings.rs" 2>/dev/null
    if ! diff -u "$src/bindings/rust/acc-sys/src/bindings.rs" "$tmp/bindings.rs" | head -40; then
      stale "STALE: bindings/rust/acc-sys/src/bindings.rs (run bindings/rust/regenerate.sh)"
    fi
    echo "bindgen output is up to date"
    ;;
esac
