#!/usr/bin/env python3
"""The key tables of docs/configuration.md are generated from the schema; this test keeps them equal.

usage: check_docs.py DUMP_SCHEMA DOC [--update]    (--update rewrites the tables in DOC)
"""
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dump, doc = sys.argv[1], sys.argv[2]
    update = "--update" in sys.argv[3:]
    text = open(doc).read()
    bad = []
    for kind in ("accelerator", "launch"):
        begin, end = f"<!-- keys:{kind}:begin -->\n", f"<!-- keys:{kind}:end -->"
        if begin not in text or end not in text:
            sys.exit(f"{doc}: missing the markers {begin.strip()} ... {end}")
        want = subprocess.run([dump, kind], check=True, capture_output=True, text=True, timeout=30).stdout
        head, rest = text.split(begin, 1)
        have, tail = rest.split(end, 1)
        if have != want:
            bad.append(kind)
        text = head + begin + want + end + tail
    if update:
        open(doc, "w").write(text)
        print(f"{doc}: tables rewritten")
        return
    if bad:
        sys.exit(f"{doc}: the {' and '.join(bad)} key table(s) differ from the schema; regenerate with\n"
                 f"  python3 {sys.argv[0]} {dump} {doc} --update")
    print("docs match the schema")


main()
