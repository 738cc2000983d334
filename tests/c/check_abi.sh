#!/bin/sh
# The ABI only grows within a major version: abidiff the built libacc against the committed 1.0.0
# baseline; a removed or changed function or type fails, additions pass. It first checks that it can
# fail: a baseline with one extra function (as if the library had lost it) must be refused.
set -u
baseline="$1" lib="$2" headers="$3"
command -v abidiff >/dev/null || { echo "abidiff not found (Debian: abigail-tools; scripts/setup.sh installs it)"; echo "0 passed, 1 failed"; exit 1; }
failed=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT  # abidiff's report goes to the log, never into the checkout
abidiff --no-added-syms --headers-dir2 "$headers" --drop-private-types "$baseline" "$lib" > "$tmp/abi.diff" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  echo "libacc's ABI differs from $baseline (abidiff exit $rc):"; cat "$tmp/abi.diff"; failed=1
else
  echo "libacc keeps every function and type of $(basename "$baseline")"
fi
# Additions carry a newer symbol version than ACC_1.0 (capi/acc.map): a function the baseline lacks but
# the library exports as ACC_1.0 was added without its version node.
unversioned_against() {
  objdump -T "$lib" | awk '$NF ~ /^acc_/ && $(NF-1) == "ACC_1.0" {print $NF}' | while read -r f; do
    grep -q "name='$f'" "$1" || echo "$f"; done
}
unversioned=$(unversioned_against "$baseline")
if [ -n "$unversioned" ]; then
  echo "added after 1.0.0 but exported as ACC_1.0 (name them in a newer node of capi/acc.map):" $unversioned
  failed=1
fi
# The self-check: a function that only the baseline has is a removal.
sed "s/acc_version'/acc_version_removed_probe'/g" "$baseline" > "$tmp/probe.abi"
if abidiff --no-added-syms --headers-dir2 "$headers" --drop-private-types "$tmp/probe.abi" "$lib" > "$tmp/out" 2>&1; then
  echo "abidiff did not notice a removed function: this test could not fail"; failed=1
fi
# And a baseline without acc_version (an ACC_1.0 function) makes acc_version look added as ACC_1.0.
sed "s/name='acc_version'/name='acc_version_absent_probe'/g" "$baseline" > "$tmp/lacking.abi"
if [ "$(unversioned_against "$tmp/lacking.abi")" != "acc_version" ]; then
  echo "the ACC_1.0 check did not notice acc_version missing from a baseline: this test could not fail"; failed=1
fi
if [ $failed -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $failed
