#!/usr/bin/env python3
"""Prints how to compile and link against LibTorch, one `key=value` per line, for meson.build.

Reads a LibTorch tree (the torch wheel's `torch/` folder or an official LibTorch) without importing
torch, so it works where the wheel's CUDA dependencies are absent. Usage: torch_config.py ROOT
"""
import pathlib
import re
import subprocess
import sys


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    include, lib = root / "include", root / "lib"
    if not (include / "ATen" / "ATen.h").is_file() or not (lib / "libtorch_cpu.so").is_file():
        print(f"error=no LibTorch at {root}: expected include/ATen/ATen.h and lib/libtorch_cpu.so")
        return 0
    version = "unknown"
    header = include / "torch" / "csrc" / "api" / "include" / "torch" / "version.h"
    if header.is_file():
        m = re.search(r'#define TORCH_VERSION\s+"([^"]+)"', header.read_text())
        if m:
            version = m.group(1)
    if version == "unknown" and (root / "version.py").is_file():
        m = re.search(r"__version__\s*=\s*'([^']+)'", (root / "version.py").read_text())
        if m:
            version = m.group(1)
    # The C++ ABI shows in libc10's mangled names: __cxx11 strings mean the new ABI.
    syms = subprocess.run(["nm", "-D", str(lib / "libc10.so")], capture_output=True, text=True).stdout
    cxx11_abi = 1 if "__cxx11" in syms else 0
    print(f"version={version}")
    print(f"include={include}")
    print(f"api_include={include / 'torch' / 'csrc' / 'api' / 'include'}")
    print(f"lib={lib}")
    print(f"cxx11_abi={cxx11_abi}")
    print(f"cuda={1 if (lib / 'libtorch_cuda.so').is_file() else 0}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
