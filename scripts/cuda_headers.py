#!/usr/bin/env python3
"""Helpers for scripts/setup.sh's CUDA steps. Run with .venv/bin/python (it reads that environment).

  cuda_headers.py pins            the header wheels' pins, one a line, as cuda-toolkit (torch's pin) gives them
  cuda_headers.py extract OUT W.. copy the include/ trees of the wheels W.. into OUT (nothing else)
  cuda_headers.py runtime         torch's CUDA requirements (cuda-toolkit[...], nvidia-*), one a line
"""
import importlib.metadata as md
import pathlib
import re
import shutil
import sys
import zipfile

# The packages whose headers ProcessGroupNCCL.hpp reaches beyond cudart and NCCL (installed by setup.sh):
# cuBLAS (cublas_v2.h, cublasLt.h), cuSPARSE, cuSOLVER (cusolverDn.h), CRT (crt/host_config.h from
# cuda_runtime.h) and CCCL (<nv/target> from cuda_fp16.h).
HEADER_PACKAGES = ["nvidia-cuda-crt", "nvidia-cuda-cccl", "nvidia-cublas", "nvidia-cusparse", "nvidia-cusolver"]


def name_of(spec: str) -> str:
    return re.split(r"[\s<>=!~;\[]", spec.strip(), maxsplit=1)[0].lower()


def pins() -> int:
    found = {}
    for req in md.requires("cuda-toolkit") or []:
        spec = req.split(";")[0].replace(" ", "")
        if name_of(spec) in HEADER_PACKAGES:
            found[name_of(spec)] = spec
    missing = [p for p in HEADER_PACKAGES if p not in found]
    if missing:
        print("cuda-toolkit " + md.version("cuda-toolkit") + " names no version for " + ", ".join(missing),
              file=sys.stderr)
        return 1
    print("\n".join(found[p] for p in HEADER_PACKAGES))
    return 0


def extract(out: str, wheels: list) -> int:
    dest = pathlib.Path(out)
    n = 0
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            for info in z.infolist():
                m = re.match(r"nvidia/cu\d+/include/(.+)", info.filename)
                if not m or info.is_dir():
                    continue
                target = dest / m.group(1)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                n += 1
    if n == 0:
        print("no nvidia/cu*/include/ files in " + " ".join(wheels), file=sys.stderr)
        return 1
    return 0


def runtime() -> int:
    reqs = [r.split(";")[0].replace(" ", "") for r in md.requires("torch") or [] if "extra ==" not in r]
    print("\n".join(r for r in reqs if name_of(r) == "cuda-toolkit" or name_of(r).startswith("nvidia-")))
    return 0


def main() -> int:
    if len(sys.argv) == 2 and sys.argv[1] == "pins":
        return pins()
    if len(sys.argv) >= 4 and sys.argv[1] == "extract":
        return extract(sys.argv[2], sys.argv[3:])
    if len(sys.argv) == 2 and sys.argv[1] == "runtime":
        return runtime()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
