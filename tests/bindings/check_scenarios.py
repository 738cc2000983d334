#!/usr/bin/env python3
"""Every binding's tests cover every scenario of tests/bindings/scenarios.txt: each test file carries a
`scenario: <id>` marker (or `scenario n/a: <id> <why>`) for each id.  Usage: check_scenarios.py SOURCE_ROOT"""
import re
import sys

root = sys.argv[1]
ids = [line.split()[0] for line in open(f"{root}/tests/bindings/scenarios.txt")
       if line.strip() and not line.startswith("#")]
files = {
    "rust": "bindings/rust/acc/tests/conformance.rs",
    "go": "bindings/go/acc/conformance_test.go",
    "java": "bindings/java/src/test/java/ai/acc/ConformanceTest.java",
}
missing = []
for lang, path in files.items():
    text = open(f"{root}/{path}").read()
    marked = set(re.findall(r"scenario(?: n/a)?: (\w+)", text))
    for i in ids:
        if i not in marked:
            missing.append(f"{lang} ({path}) lacks scenario {i}")
    na = re.findall(r"scenario n/a: (\w+)", text)
    print(f"{lang}: {len(ids) - len(na)} of {len(ids)} scenarios" + (f" (n/a: {', '.join(na)})" if na else ""))
for m in missing:
    print("FAILED", m, file=sys.stderr)
sys.exit(1 if missing else 0)
