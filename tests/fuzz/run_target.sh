#!/usr/bin/env bash
# Runs one libFuzzer target for a while over its seed corpus; what meson's fuzz-smoke tests and scripts/fuzz.sh run.
#   run_target.sh EXE NAME SECONDS SEED_DIR DICT FINDINGS_DIR [WORK_CORPUS_DIR] [-- EXTRA_LIBFUZZER_FLAGS...]
# WORK_CORPUS_DIR receives the new inputs the fuzzer finds (kept between runs); empty or absent: a temporary folder,
# removed afterwards. Crashes, timeouts (-timeout=10 s per input), leaks and out-of-memory inputs are written to
# FINDINGS_DIR/NAME/ (crash-*, timeout-*, leak-*, oom-*, slow-unit-*). Prints the number of inputs run and exits 1
# when the fuzzer stopped on a finding.
set -uo pipefail
exe=$1 name=$2 seconds=$3 seeds=$4 dict=$5 findings=$6
work=${7:-}
shift $(( $# < 7 ? $# : 7 ))
[[ ${1:-} == -- ]] && shift
extra=("$@")

tmp_work=""
if [[ -z $work ]]; then
  tmp_work=$(mktemp -d "${TMPDIR:-/tmp}/acc-fuzz-$name.XXXXXX")
  work=$tmp_work
fi
mkdir -p "$work" "$findings/$name"
log=$(mktemp "${TMPDIR:-/tmp}/acc-fuzz-$name.log.XXXXXX")
cleanup() { [[ -n $tmp_work ]] && rm -rf "$tmp_work"; rm -f "$log"; }
trap cleanup EXIT

before=$(ls "$findings/$name" 2>/dev/null | sort)
# ASan: leaks are findings too (libFuzzer's -detect_leaks); UBSan: stop at the first report so it is stored.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
"$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
  -error_exitcode=77 -timeout_exitcode=78 -dict="$dict" -artifact_prefix="$findings/$name/" \
  "${extra[@]}" "$work" "$seeds" >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
after=$(ls "$findings/$name" 2>/dev/null | sort)
new=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed '/^$/d')
echo "$name: rc=$rc, ${execs:-?} inputs run (${speed:-?}/s; budget ${seconds}s), $(ls "$work" | wc -l) new corpus files"
if ((rc != 0)) || [[ -n $new ]]; then
  # the report: libFuzzer's summary, the sanitizer's first frames, and the reproducer
  grep -E '^==[0-9]+==|^==fuzz==|SUMMARY|ERROR: libFuzzer|^ +#[0-9]+ .* in (acc|YAML|CLI|std::__|LLVMFuzzer)|Test unit written|^artifact_prefix|Slowest unit' "$log" | head -40
  for f in $new; do echo "$name: finding $findings/$name/$f"; done
  echo "$name: reproduce with: $exe -timeout=10 $findings/$name/<file>   (full log above; last 30 lines:)"
  tail -30 "$log"
  exit 1
fi
exit 0
