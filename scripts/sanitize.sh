#!/usr/bin/env bash
# The sanitizer build: libacc, the launcher and the tests compiled with AddressSanitizer and UndefinedBehaviorSanitizer
# (gcc, -fno-sanitize-recover: the first report fails the test) in build-asan/, then the C, C++, multi-process,
# config and launcher suites run under them (docs/security.md). LibTorch itself is not instrumented: its memory is
# checked only where libacc's code touches it.
#   scripts/sanitize.sh                  configure (once), build, run the suites (about 40 minutes on 2 cores)
#   scripts/sanitize.sh --suite capi     other arguments go to meson test
#   scripts/sanitize.sh --torch-free     the config library and the launcher only (-Dcore=false, build-asan-lite/):
#                                        their suites under the sanitizers in about 3 minutes (what scripts/test.sh runs)
# Leak detection is off: LibTorch keeps process-lifetime singletons that LeakSanitizer would report at exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bash scripts/setup.sh >/dev/null
bdir=build-asan core=true
suites=(--suite capi --suite cpp --suite mp --suite config --suite launcher --suite multinode)
if [[ ${1:-} == --torch-free ]]; then
  shift
  bdir=build-asan-lite core=false
  suites=(--suite config --suite launcher)
fi
if [[ ! -f $bdir/build.ninja ]]; then
  echo "sanitize.sh: configuring $bdir (ASan + UBSan)"
  # The bindings load libacc into other runtimes (cargo test, go test, the JVM) that would need the sanitizer
  # runtime preloaded; their suites are not run here.
  meson setup "$bdir" -Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false -Dcore=$core \
    -Dcargo_dir="$PWD/build" \
    -Dcpp_args=-fno-sanitize-recover=undefined -Dc_args=-fno-sanitize-recover=undefined -Dcuda=disabled >/dev/null
fi
start=$(date +%s)
ninja -C "$bdir"
echo "sanitize.sh: built in $(( $(date +%s) - start )) s"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
(($#)) && suites=("$@")
start=$(date +%s)
status=0
# Sanitized code runs several times slower: the tests get three times their timeouts.
meson test -C "$bdir" --no-rebuild --print-errorlogs --num-processes 2 --timeout-multiplier 3 "${suites[@]}" || status=$?
echo "sanitize.sh: tests ran in $(( $(date +%s) - start )) s"
exit $status
