#!/usr/bin/env bash
# The benchmarks' own Python environment: the full PyTorch (its CUDA libraries included, several GB,
# since PyPI's Linux torch is a CUDA build that Python cannot import without them) and Accelerate,
# to run the same workload through PyTorch DDP and Accelerate beside libacc. Not needed to build or
# test libacc. Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp=.venv-bench/.acc-bench-torch-2.15.0
if [[ ! -f $stamp ]]; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --upgrade pip >/dev/null
  .venv-bench/bin/pip install -q "torch==2.15.0" "accelerate==1.15.0" numpy
  touch "$stamp"
fi
