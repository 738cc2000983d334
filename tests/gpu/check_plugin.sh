#!/bin/sh
# The CUDA plugin is built, exports its entry point and nothing else, keeps libtorch_cuda NEEDED
# (its CUDA hooks register when the plugin loads), and libacc itself never needs libtorch_cuda.
# Usage: check_plugin.sh LIBACC_CUDA_SO LIBACC_SO
plugin="$1" lib="$2" passed=0 failed=0
check() {  # check "what" command...
  what="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $what"; fi
}
syms=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sed 's/@.*//' | grep -v '^$')
echo "libacc_cuda.so exports: $(echo $syms)"
check "exports only acc_cuda_plugin_v1 (and its version node)" \
  test "$(printf '%s\n' "$syms" | grep -v -x -e acc_cuda_plugin_v1 -e 'ACC_CUDA_[0-9]*')" = ""
check "exports acc_cuda_plugin_v1" sh -c "printf '%s\n' \"$syms\" | grep -q -x acc_cuda_plugin_v1"
needed=$(readelf -d "$plugin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
check "NEEDED libtorch_cuda.so" sh -c "printf '%s\n' \"$needed\" | grep -q -x libtorch_cuda.so"
check "NEEDED libc10_cuda.so" sh -c "printf '%s\n' \"$needed\" | grep -q -x libc10_cuda.so"
lib_needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
check "libacc does not need libtorch_cuda or libc10_cuda" \
  sh -c "! printf '%s\n' \"$lib_needed\" | grep -q -e torch_cuda -e c10_cuda"
check "the plugin sits next to libacc" test "$(dirname "$plugin")" = "$(dirname "$lib")"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
