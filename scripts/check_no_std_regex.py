#!/usr/bin/env python3
"""No std::regex outside the tests: every regular expression libacc and the launcher run is RE2's
(src/util/pattern.hpp: linear in the text, bounded in stack and memory). std::regex backtracks, so a pattern from a
file or a caller could hang the process or overflow its stack.

  check_no_std_regex.py [SOURCE_ROOT]     (default: the checkout this script lives in)

Reads the C and C++ files of src/, capi/, base/ and launcher/ (comments left out) for `#include <regex>` and the
std:: names that header declares. Test 'no-std-regex', suite 'docs'.
"""
import os
import re
import sys

FOLDERS = ("src", "capi", "base", "launcher")
FORBIDDEN = re.compile(r"#\s*include\s*<regex>|\bstd::(?:w?regex\w*|basic_regex|w?[cs]?match\w*|w?[cs]regex_\w+|"
                       r"sub_match|match_results)\b")


def code_of(text):
    """The text with its comments blanked (line numbers kept); string literals are left as they are."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found, files = [], 0
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith((".h", ".hpp", ".c", ".cc", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    lines = code_of(f.read()).split("\n")
                files += 1
                for i, line in enumerate(lines, 1):
                    if FORBIDDEN.search(line):
                        found.append(f"{os.path.relpath(path, root)}:{i}: {line.strip()}")
    if found:
        print("std::regex outside the tests (use acc::core::Pattern, src/util/pattern.hpp):")
        print("\n".join("  " + f for f in found))
        return 1
    print(f"{files} files of {', '.join(FOLDERS)} checked: no std::regex")
    return 0


if __name__ == "__main__":
    sys.exit(main())
