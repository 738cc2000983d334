#!/usr/bin/env python3
"""No function is longer than 100 lines (issue 38): a longer one is split into functions of one concern each.

  check_function_length.py [SOURCE_ROOT]     (default: the checkout this script lives in)

Measures every function of the C, C++ and Rust files of src/, base/, capi/ and launcher/ (cargo's target/ folders
left out) with lizard (tests/requirements.txt pins it; scripts/setup.sh --tests installs it into .venv-test, whose
Python this script runs under), from its first line to its last, comments and blank lines included. What is longer
than LIMIT fails, named with its file, line and length, unless ALLOWED lists it with the reason it may be: a
declarative table (one entry a line) reads best whole. An entry that no longer names a function over the limit fails
too, so that the list only holds what it must. Test 'function-length', suite 'docs'. By hand, the same listing:

  .venv-test/bin/lizard -L 100 -C 10000 -a 100 -w src base capi launcher

(which also reads target/ and, for Rust, counts a function up to wherever a char literal such as 'e' misleads it:
see rust_char_literals below).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv-test")
VENV_PYTHON = os.path.join(VENV, "bin", "python")
if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    os.execv(VENV_PYTHON, [VENV_PYTHON, *sys.argv])

try:
    import lizard
    from lizard_languages.code_reader import CodeReader
    from lizard_languages.rust import RustReader
except ImportError as e:  # no .venv-test: scripts/setup.sh --tests makes it
    print(f"SKIP: lizard is not installed ({e}); run scripts/setup.sh --tests for .venv-test")
    sys.exit(77)

LIMIT = 100
FOLDERS = ("src", "base", "capi", "launcher")
EXTENSIONS = (".c", ".h", ".cc", ".cpp", ".hpp", ".rs")

# (file, function as lizard names it) -> why it may be longer than LIMIT.
ALLOWED = {
    ("base/src/schema.cpp", "acc::config::detail::make_accelerator"):
        "declarative table: the accelerator config's keys, one a line",
    ("base/src/schema.cpp", "acc::config::detail::make_launch"):
        "declarative table: the launch config's keys, one a line",
}


def rust_char_literals():
    """lizard reads 'e' (a char literal made of a word character) as the lifetime 'e followed by a quote that opens a
    string, and so merges the functions that follow into one: a lifetime is never directly followed by a quote."""
    RustReader.generate_tokens = staticmethod(
        lambda source_code, addition="", token_class=None: CodeReader.generate_tokens(
            source_code, r"|(?:'\w+\b(?!'))", token_class))


def source_files(root):
    for folder in FOLDERS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, folder)):
            dirnames[:] = sorted(d for d in dirnames if d != "target" and not d.startswith("."))
            for name in sorted(names):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else ROOT
    rust_char_literals()
    files = list(source_files(root))
    too_long, allowed, functions = [], {}, 0
    for info in lizard.analyze_files(files):
        path = os.path.relpath(info.filename, root).replace(os.sep, "/")
        for f in info.function_list:
            functions += 1
            if f.length <= LIMIT:
                continue
            if (path, f.name) in ALLOWED:
                allowed[(path, f.name)] = f.length
            else:
                too_long.append((path, f.start_line, f.name, f.length))
    stale = [key for key in ALLOWED if key not in allowed]
    for (path, name), length in sorted(allowed.items()):
        print(f"allowed: {path}: {name}: {length} lines ({ALLOWED[(path, name)]})")
    if too_long or stale:
        if too_long:
            print(f"FAIL: functions longer than {LIMIT} lines (split each into functions of one concern; a declarative "
                  "table may go into ALLOWED, scripts/check_function_length.py, with its reason):")
            for path, line, name, length in sorted(too_long):
                print(f"  {path}:{line}: {name}: {length} lines")
        if stale:
            print(f"FAIL: ALLOWED names functions that are not longer than {LIMIT} lines (or no longer exist): remove "
                  "their entries from scripts/check_function_length.py:")
            for path, name in stale:
                print(f"  {path}: {name}")
        return 1
    print(f"ok: {functions} functions in {len(files)} files of {', '.join(FOLDERS)}, none longer than {LIMIT} lines "
          f"but the {len(allowed)} allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
