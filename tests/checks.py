"""Pass/fail counting for the Python test scripts: expect() counts one check and prints a failed one with what it
checked and the detail; finish() prints the "N passed, N failed" line and exits non-zero on any failure."""
import sys

passed = failed = 0


def expect(cond, what, detail=""):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}\n{detail}", file=sys.stderr)


def finish():
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
