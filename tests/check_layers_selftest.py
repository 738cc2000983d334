#!/usr/bin/env python3
"""scripts/check_layers.py fails where it should: small src/ trees in a temporary folder, one clean, one with an
include cycle, one with a class whose method a folder above it defines. Test 'layers-selftest', suite 'docs'."""
import os
import subprocess
import sys
import tempfile

from checks import expect, finish

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "check_layers.py")


def run(files):
    """check_layers.py over a tree of {path under src/: text}: (exit status, output)."""
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            full = os.path.join(root, "src", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
        r = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr


LOW = {
    "low/thing.hpp": "#pragma once\nclass Thing {\n public:\n  int size() const;\n};\n",
    "low/thing.cpp": '#include "low/thing.hpp"\n\nint Thing::size() const { return 1; }\n',
}
HIGH = {"high/user.cpp": '#include "low/thing.hpp"\n\nint use(const Thing& t) { return t.size(); }\n'}

status, out = run({**LOW, **HIGH})
expect(status == 0 and "ok: the folders of src/ form layers" in out, "a clean tree passes", out)
expect("layer 1: high (-> low)" in out, "the layers are printed, each above what it includes", out)

cycle = {**LOW, **HIGH, "low/back.cpp": '#include "high/user.hpp"\n', "high/user.hpp": "#pragma once\n"}
status, out = run(cycle)
expect(status == 1 and "include each other" in out, "an include cycle fails", out)
expect('src/low/back.cpp:1: #include "high/user.hpp"' in out, "the cycle names the include line that closes it", out)

foreign = {**LOW, **HIGH, "high/more.cpp": '#include "low/thing.hpp"\n\n// why\nint Thing::more() const {\n}\n'}
status, out = run(foreign)
expect(status == 1 and "implemented by another folder" in out, "a method defined by a folder above its class fails",
       out)
expect("src/high/more.cpp:4: defines a method of Thing (declared in src/low/)" in out,
       "the definition is named with its file and line", out)

finish()
