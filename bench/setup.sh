#!/usr/bin/env bash
# The benchmarks' own Python environment: the full PyTorch (its CUDA libraries included, several GB,
# since PyPI's Linux torch is a CUDA build that Python cannot import without them) and Accelerate,
# to run the same workload through PyTorch DDP and Accelerate beside libacc. Not needed to build or
# test libacc. Also Hugging Face transformers, used only by tests/hf/make_fixtures.py to regenerate
# the committed reference fixtures under tests/hf/fixtures (CI never runs it), and peft, used only by
# tests/finetune/make_fixtures.py (LoRA adapters and parameter-group names), and datasets with pyarrow, used only by
# tests/data/make_fixtures.py (the dataset files the readers of src/data/files are checked against). Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stamp=.venv-bench/.acc-bench-torch-2.15.0
if [[ ! -f $stamp ]]; then
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --upgrade pip >/dev/null
  .venv-bench/bin/pip install -q "torch==2.15.0" "accelerate==1.15.0" numpy
  touch "$stamp"
fi
stamp=.venv-bench/.acc-bench-transformers-5.23.0
if [[ ! -f $stamp ]]; then
  .venv-bench/bin/pip install -q "transformers==5.23.0"
  touch "$stamp"
fi
stamp=.venv-bench/.acc-bench-peft-0.21.2
if [[ ! -f $stamp ]]; then
  .venv-bench/bin/pip install -q "peft==0.21.2"
  touch "$stamp"
fi
stamp=.venv-bench/.acc-bench-datasets-5.2.0-pyarrow-26.0.1
if [[ ! -f $stamp ]]; then
  .venv-bench/bin/pip install -q "datasets==5.2.0" "pyarrow==26.0.1"
  touch "$stamp"
fi
stamp=.venv-bench/.acc-bench-trl-1.16.0
if [[ ! -f $stamp ]]; then
  # TRL's SFT preparation and collator, used only by tests/data/make_prep_fixtures.py.
  .venv-bench/bin/pip install -q "trl==1.16.0"
  touch "$stamp"
fi
