#!/usr/bin/env bash
# The API reference: Doxygen HTML of the C ABI (capi/include/acc/acc.h) and the C++ API
# (capi/include/acc/torch.hpp), configured by docs/Doxyfile, into OUT/html (OUT defaults to out/apidocs).
# Fails on any doxygen warning: an undocumented public function, type or macro, or a malformed comment.
#
#   scripts/apidocs.sh [--check] [OUT]
#     --check   also build the bindings' references without warnings where the toolchain is here:
#               rustdoc (cargo doc, crates acc-sys and acc), go vet + go doc (bindings/go) and javadoc
#               (the ai.acc sources). None needs libacc built. A missing toolchain is reported and skipped.
#
# Exit status: 0 clean, 1 warnings (listed), 77 doxygen missing (the meson test 'apidocs' then skips;
# scripts/setup.sh installs doxygen).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
check_bindings=0
if [[ ${1:-} == --check ]]; then check_bindings=1; shift; fi
out=${1:-$root/out/apidocs}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ! command -v doxygen >/dev/null; then
  echo "apidocs: doxygen is not installed (Debian: apt-get install doxygen; scripts/setup.sh installs it)" >&2
  exit 77
fi

version=$(sed -n "s/^ *version: *'\([^']*\)'.*/\1/p" "$root/meson.build" | head -n1)
failed=0

# --- Doxygen: the C ABI and the C++ API --------------------------------------------------------------
rm -rf "$out/html" "$out/warnings.log"
cd "$root"
if ! ACC_VERSION=$version ACC_APIDOCS_OUT=$out doxygen docs/Doxyfile >"$out/doxygen.log" 2>&1; then
  failed=1
fi
if [[ -s $out/warnings.log ]]; then
  echo "apidocs: doxygen warnings (docs/Doxyfile; every public function, type and macro needs a doc comment):" >&2
  sed "s|$root/||" "$out/warnings.log" >&2
  failed=1
elif ((failed)); then
  echo "apidocs: doxygen failed:" >&2
  cat "$out/doxygen.log" >&2
fi
if ((!failed)); then
  echo "apidocs: libacc $version API reference: $out/html/index.html"
fi

# --- The bindings' references (no libacc needed) -----------------------------------------------------
if ((check_bindings)); then
  export PATH="$PATH:$HOME/.cargo/bin:/usr/local/go/bin"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT

  # Runs one binding's check (a function) where its tool is installed: its output is shown only when it fails.
  check() {  # check TOOL NAME FUNCTION
    local tool=$1 name=$2 fn=$3
    if ! command -v "$tool" >/dev/null; then
      echo "apidocs: $tool not found: $name not checked" >&2
    elif ! ("$fn") >"$tmp/$fn.log" 2>&1; then  # a subshell: the function may change directory
      echo "apidocs: $name failed:" >&2
      cat "$tmp/$fn.log" >&2
      failed=1
    else
      echo "apidocs: $name clean"
    fi
  }

  # rustdoc: -D warnings makes every rustdoc lint (broken links, bare URLs, bad HTML) an error; cargo fmt --check
  # (as gofmt for Go below) for the crates and the Rust examples. ACC_LIB_DIR: acc-sys's build script then looks
  # for no libacc (documenting links nothing).
  rustdoc_check() {
    (cd examples/rust && cargo fmt --check) && cd bindings/rust && cargo fmt --check &&
      ACC_LIB_DIR=$tmp CARGO_TARGET_DIR=$out/cargo RUSTDOCFLAGS="-D warnings" \
        cargo doc --offline --no-deps --workspace -q
  }
  check cargo "cargo fmt and rustdoc (bindings/rust, examples/rust)" rustdoc_check

  # godoc: gofmt (which also normalizes doc comments), go vet and go doc of the public package. cgo
  # finds acc.h through a pkg-config file of the source tree's headers (vet compiles, links nothing).
  # -unsafeptr=false: the handles keep C pointers (C memory) as uintptr, which that analyzer flags.
  godoc_check() {
    mkdir -p "$tmp/pc"
    printf 'Name: acc\nDescription: acc.h only\nVersion: %s\nCflags: -I%s\nLibs: -lacc\n' \
      "$version" "$root/capi/include" >"$tmp/pc/acc.pc"
    cd bindings/go
    local unformatted
    unformatted=$(gofmt -l .)
    [[ -z $unformatted ]] || { echo "gofmt -l: $unformatted"; return 1; }
    PKG_CONFIG_PATH=$tmp/pc go vet -unsafeptr=false ./... && PKG_CONFIG_PATH=$tmp/pc go doc -all ./acc >/dev/null
  }
  check go "go vet and go doc (bindings/go)" godoc_check

  # javadoc: the whole doclint over the public API, ai.acc, and every warning fails. Every public class,
  # member and enum constant has a comment ("no comment"), every parameter, result and checked exception
  # its @param, @return and @throws tag, and every comment is well formed (syntax, HTML, references).
  if command -v javadoc >/dev/null; then
    javadoc -quiet -Xmaxwarns 100000 -Xmaxerrs 100000 -Xdoclint:all -d "$tmp/javadoc" \
      -sourcepath bindings/java/src/main/java -subpackages ai.acc -exclude ai.acc.internal \
      >"$tmp/javadoc.log" 2>&1 || true
    if grep -E ': (warning|error): ' "$tmp/javadoc.log" >"$tmp/javadoc.bad"; then
      echo "apidocs: javadoc (bindings/java) has warnings:" >&2
      cat "$tmp/javadoc.bad" >&2
      failed=1
    elif [[ ! -f $tmp/javadoc/index.html ]]; then
      echo "apidocs: javadoc (bindings/java) failed:" >&2
      cat "$tmp/javadoc.log" >&2
      failed=1
    else
      echo "apidocs: javadoc clean (bindings/java, ai.acc)"
    fi
  else
    echo "apidocs: javadoc not found: javadoc not checked" >&2
  fi
fi
exit "$failed"
