#!/usr/bin/env bash
# Regenerates the SWIG output that is committed (so that Go and Java users need no SWIG):
#   bindings/go/internal/raw/{raw.go,raw_wrap.c}
#   bindings/java/src/main/java/ai/acc/internal/*.java, bindings/java/native/acc_jni_wrap.c
# from bindings/swig/acc.i and capi/include/acc/acc.h. Run it after changing either; the meson test
# 'swig-fresh' fails when the committed output is stale.
#
#   bindings/swig/generate.sh [OUT_ROOT]   (OUT_ROOT defaults to the source tree; the test passes a
#                                           temporary directory and compares)
# ACC_INCLUDE_DIR overrides the header directory (default: capi/include).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root}
inc=${ACC_INCLUDE_DIR:-$root/capi/include}
swig=${SWIG:-swig}
cd "$root/bindings/swig" # file names in the generated comments stay relative and stable

go_dir=$out/bindings/go/internal/raw
java_dir=$out/bindings/java/src/main/java/ai/acc/internal
jni_dir=$out/bindings/java/native
mkdir -p "$go_dir" "$java_dir" "$jni_dir"
rm -f "$java_dir"/*.java

"$swig" -go -cgo -intgosize 64 -I"$inc" -o "$go_dir/raw_wrap.c" -outdir "$go_dir" acc.i
"$swig" -java -module AccRaw -package ai.acc.internal -I"$inc" -o "$jni_dir/acc_jni_wrap.c" -outdir "$java_dir" acc.i
# gofmt keeps the committed Go file tidy (and stable across SWIG's formatting).
if command -v gofmt >/dev/null; then gofmt -w "$go_dir/raw.go"; fi
