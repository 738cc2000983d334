#!/bin/sh
# Writes tests/compat/<version>/ from the git history: each release's public header, its linker version script
# and its reference program (examples/c/train_mlp.c), as that release shipped them. Run from the repository
# (it needs the history; CI does not run it, the files are committed).
set -eu
cd "$(dirname "$0")/../.."
for pair in 1.0:9f56b78 1.1:f38f3cc^; do
  version=${pair%%:*} commit=${pair#*:}
  test "$(git show "$commit:meson.build" | sed -n "s/^ *version: '\(.*\)',/\1/p")" = "$version.0"
  mkdir -p "tests/compat/$version/acc"
  git show "$commit:capi/include/acc/acc.h" > "tests/compat/$version/acc/acc.h"
  git show "$commit:capi/acc.map" > "tests/compat/$version/acc.map"
  git show "$commit:examples/c/train_mlp.c" > "tests/compat/$version/train_mlp.c"
done
