#!/usr/bin/env python3
"""One version everywhere: meson.build's project(version: ...) is the source of truth, and this test
compares every other place a version is stated or reported with it.

  check_versions.py SOURCE_ROOT [BUILD_ROOT ACC_EXE LIBACC]

Without the build arguments only the files are compared (acc.h's ACC_VERSION_*, the Rust crates, the
Java pom, the Go module's documented tag, the examples that depend on the bindings, CHANGELOG.md). With
them it also runs `acc --version`, calls acc_version() through ctypes on the built libacc and reads the
pkg-config files meson generated (acc.pc, acc-torch.pc).
"""
import ctypes
import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET

failures = []


def check(what, found, want):
    if found != want:
        failures.append(f"{what}: {found!r}, meson.build says {want!r}")
    else:
        print(f"ok  {what}: {found}")


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def meson_version(root):
    m = re.search(r"project\(\s*'libacc'.*?\bversion\s*:\s*'([^']+)'", read(root, "meson.build"), re.S)
    if not m:
        sys.exit("check_versions: no version in meson.build's project()")
    return m.group(1)


def pom_versions(path):
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    tree = ET.parse(path).getroot()
    own = tree.find("m:version", ns).text
    deps = {f"{d.find('m:groupId', ns).text}:{d.find('m:artifactId', ns).text}": d.find("m:version", ns).text
            for d in tree.iterfind("m:dependencies/m:dependency", ns)}
    return own, deps


def files(root, v):
    # The C header's macros.
    h = read(root, "capi/include/acc/acc.h")
    parts = [re.search(rf"#define ACC_VERSION_{p} (\d+)", h).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    check("acc.h ACC_VERSION_MAJOR.MINOR.PATCH", ".".join(parts), v)

    # Rust: the workspace version both crates inherit, acc's requirement on acc-sys, the lock file.
    ws = tomllib.loads(read(root, "bindings/rust/Cargo.toml"))
    check("bindings/rust/Cargo.toml workspace.package.version", ws["workspace"]["package"]["version"], v)
    for crate in ("acc-sys", "acc"):
        pkg = tomllib.loads(read(root, f"bindings/rust/{crate}/Cargo.toml"))["package"]
        check(f"bindings/rust/{crate} version inherits the workspace's",
              pkg.get("version") == {"workspace": True}, True)
    dep = tomllib.loads(read(root, "bindings/rust/acc/Cargo.toml"))["dependencies"]["acc-sys"]
    check("bindings/rust/acc's dependency on acc-sys", dep.get("version"), v)
    for lockfile in ("bindings/rust/Cargo.lock", "examples/rust/Cargo.lock"):
        for p in tomllib.loads(read(root, lockfile))["package"]:
            if p["name"] in ("acc", "acc-sys"):
                check(f"{lockfile} {p['name']}", p["version"], v)

    # Java: the binding's pom, and the example that depends on it.
    own, _ = pom_versions(os.path.join(root, "bindings/java/pom.xml"))
    check("bindings/java/pom.xml version", own, v)
    _, deps = pom_versions(os.path.join(root, "examples/java/pom.xml"))
    check("examples/java/pom.xml dependency ai.acc:acc", deps.get("ai.acc:acc"), v)

    # Go: a module in a subdirectory is versioned by tags named after its directory: bindings/go/vX.Y.Z.
    gomod = read(root, "bindings/go/go.mod")
    path = re.search(r"^module (\S+)", gomod, re.M).group(1)
    check("bindings/go module path (major 1: no /vN suffix)", path, "github.com/libacc/libacc/bindings/go")
    check("bindings/go/README.md documents the tag", f"bindings/go/v{v}" in read(root, "bindings/go/README.md"), True)
    req = re.search(r"^require github.com/libacc/libacc/bindings/go (\S+)", read(root, "examples/go/go.mod"), re.M)
    check("examples/go/go.mod requires the binding at", req.group(1) if req else None, f"v{v}")

    # The changelog has a section for this version.
    check("CHANGELOG.md has a section for it",
          re.search(rf"^## \[{re.escape(v)}\]", read(root, "CHANGELOG.md"), re.M) is not None, True)


def built(build, acc_exe, libacc, v):
    out = subprocess.run([acc_exe, "--version"], capture_output=True, text=True, timeout=60)
    check("acc --version", out.stdout.strip(), f"acc {v}")
    lib = ctypes.CDLL(libacc)
    lib.acc_version.restype = ctypes.c_char_p
    check("acc_version()", lib.acc_version().decode(), v)
    for pc in ("acc", "acc-torch"):
        path = os.path.join(build, "meson-private", f"{pc}.pc")
        if not os.path.exists(path):
            failures.append(f"{path}: missing (meson generates it)")
            continue
        m = re.search(r"^Version:\s*(\S+)", read(build, os.path.join("meson-private", f"{pc}.pc")), re.M)
        check(f"{pc}.pc Version", m.group(1) if m else None, v)


def main():
    if len(sys.argv) not in (2, 5):
        sys.exit(__doc__)
    root = sys.argv[1]
    v = meson_version(root)
    print(f"meson.build: libacc {v}")
    files(root, v)
    if len(sys.argv) == 5:
        built(*sys.argv[2:5], v)
    if failures:
        print("\n".join(["", "versions disagree:"] + failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
