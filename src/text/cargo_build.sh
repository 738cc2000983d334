#!/bin/sh
# Meson's step for the Rust text library: cargo build, offline and locked (scripts/setup.sh fetched the
# crates), into Meson's private folder. Meson runs this only when the crate's sources changed.
# usage: cargo_build.sh CARGO MANIFEST TARGET_DIR OUTPUT
set -eu
cargo=$1 manifest=$2 target=$3 output=$4
"$cargo" build --release --locked --offline --quiet --manifest-path "$manifest" --target-dir "$target"
cp "$target/release/libacc_text_rs.a" "$output.tmp" && mv -f "$output.tmp" "$output"
