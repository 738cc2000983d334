#!/usr/bin/env python3
"""The project's C and C++ files are formatted by clang-format with the checkout's .clang-format (issue 38 item 6).

  check_format.py [SOURCE_ROOT]     (default: the checkout this script lives in)

Runs `clang-format --dry-run -Werror` of the version tests/requirements.txt pins (scripts/setup.sh --tests installs it
into .venv-test; a clang-format of that version on PATH does too) over every .c, .h, .cc, .cpp and .hpp file of
FOLDERS, and fails naming the files it would change. Left out: subprojects/ and build folders (not in FOLDERS),
EXCLUDED (files generated from elsewhere). Without clang-format of the pinned version it skips (exit 77): another
version formats some constructs differently. Test 'format', suite 'docs'. To format a file, or to see what the check
would change:

  .venv-test/bin/clang-format -i FILE...          .venv-test/bin/clang-format FILE | diff FILE -
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The folders checked: every folder of the project's own C and C++ (bindings/ holds only generated wrappers).
FOLDERS = ("src", "base", "capi", "launcher", "bench", "tests", "examples")
EXTENSIONS = (".c", ".h", ".cc", ".cpp", ".hpp")
# Not formatted: the older releases' headers and programs tests/compat/make_fixtures.sh writes from the git history
# (they are as those releases shipped them; stub.py reads their declarations).
EXCLUDED = ("tests/compat/1.0/", "tests/compat/1.1/")
VIOLATION = re.compile(r"^(.+?):\d+:\d+: (?:error|warning): .*\[-Wclang-format-violations\]$")


def pinned_version(root):
    with open(os.path.join(root, "tests", "requirements.txt"), encoding="utf-8") as f:
        m = re.search(r"^clang-format==(\S+)", f.read(), re.M)
    if not m:
        sys.exit("FAIL: tests/requirements.txt pins no clang-format")
    return m.group(1)


def find_clang_format(root, version):
    """The pinned clang-format: .venv-test's, else the one on PATH; None when neither is of that version."""
    seen = []
    for exe in (os.path.join(root, ".venv-test", "bin", "clang-format"), shutil.which("clang-format")):
        if not exe or not os.access(exe, os.X_OK):
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"clang-format version (\S+)", out)
        if m and m.group(1) == version:
            return exe, seen
        seen.append(f"{exe} ({m.group(1) if m else 'unknown version'})")
    return None, seen


def source_files(root):
    for folder in FOLDERS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(names):
                path = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                if name.endswith(EXTENSIONS) and not path.startswith(EXCLUDED):
                    yield path


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ROOT)
    version = pinned_version(root)
    exe, seen = find_clang_format(root, version)
    if not exe:
        found = f"; found {', '.join(seen)}" if seen else ""
        print(f"SKIP: clang-format {version} is not installed{found}; run scripts/setup.sh --tests for .venv-test")
        return 77
    files = list(source_files(root))
    # One run over every file: clang-format reports each place it would change as FILE:LINE:COL: error: ...
    p = subprocess.run([exe, "--dry-run", "-Werror", "--style=file", *files], cwd=root, capture_output=True, text=True)
    places = {}
    for line in p.stderr.splitlines():
        m = VIOLATION.match(line)
        if m:
            places[m.group(1)] = places.get(m.group(1), 0) + 1
    if p.returncode != 0 and not places:
        print(f"FAIL: {exe} exited with {p.returncode}:\n{p.stderr.strip()}")
        return 1
    if places:
        print(f"FAIL: {len(places)} of {len(files)} files of {', '.join(FOLDERS)} are not formatted by clang-format "
              f"{version} (.clang-format); format them with `.venv-test/bin/clang-format -i FILE...`:")
        for path in sorted(places):
            print(f"  {path}: {places[path]} places")
        return 1
    print(f"ok: {len(files)} files of {', '.join(FOLDERS)} formatted (clang-format {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
