#!/bin/sh
# Meson's step for a Rust library of libacc's (src/text/rust, src/data/files/rust): cargo build, offline and locked
# (scripts/setup.sh fetched the crates), into Meson's private folder. Meson runs this only when the crate's sources changed.
# One build makes both artifacts (the static archive and the shared library); each Meson target copies its own.
# usage: cargo_build.sh CARGO MANIFEST TARGET_DIR ARTIFACT OUTPUT   (ARTIFACT: the crate's static archive,
# libacc_text_rs.a, or its shared library under libacc's name, libacc_text.so for the crate's libacc_text_rs.so)
set -eu
cargo=$1 manifest=$2 target=$3 artifact=$4 output=$5
# The text library's memory budget uses std's unstable alloc_error_hook (src/text/rust/src/budget.rs): allowed for
# that crate alone.
RUSTC_BOOTSTRAP=acc_text_rs "$cargo" build --release --locked --offline --quiet --manifest-path "$manifest" --target-dir "$target"
case $artifact in
  *.so) built=${artifact%.so}_rs.so ;;
  *) built=$artifact ;;
esac
cp "$target/release/$built" "$output.tmp" && mv -f "$output.tmp" "$output"
