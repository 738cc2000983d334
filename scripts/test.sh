#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test suite (meson test) but "fuzz" (10 minutes;
# run it with: meson test -C build --suite fuzz), then the fuzz targets' smoke run (scripts/fuzz.sh --smoke: each
# libFuzzer target a few seconds, in the clang build build-fuzz/) and the torch-free suites under ASan + UBSan
# (scripts/sanitize.sh --torch-free; the whole sanitizer run takes 40 minutes: scripts/sanitize.sh).
# Extra arguments go to meson test (e.g. --suite capi), and skip the fuzz smoke run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh --tests
ninja -C build
status=0
meson test -C build --print-errorlogs --num-processes 2 --no-suite fuzz "$@" || status=$?
logs=(build/meson-logs/testlog.json)
if (($# == 0)); then
  bash scripts/fuzz.sh --smoke || status=1
  logs+=(build-fuzz/meson-logs/testlog.json)
  bash scripts/sanitize.sh --torch-free || status=1
  logs+=(build-asan-lite/meson-logs/testlog.json)
fi
# Closing lines: the failures by name and the totals, read from meson's own logs.
python3 - "${logs[@]}" <<'PY'
import json, collections, sys
counts = collections.Counter()
failures = []
for log in sys.argv[1:]:
    try:
        f = open(log)
    except OSError:  # that step failed before it ran a test: its status says so
        continue
    with f:
        for line in f:
            test = json.loads(line)
            counts[test["result"]] += 1
            if test["result"] not in ("OK", "EXPECTEDFAIL", "SKIP"):
                failures.append(f"{test['name']} ({test['result']}, {log})")
passed = counts["OK"] + counts["EXPECTEDFAIL"]
failed = sum(v for k, v in counts.items() if k not in ("OK", "EXPECTEDFAIL", "SKIP"))
# The failures named last, where a log cut to its tail still shows them.
for name in failures:
    print("FAILED:", name)
print(f"{passed} passed, {failed} failed, {counts['SKIP']} skipped")
PY
exit $status
