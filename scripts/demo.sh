#!/usr/bin/env bash
# README command 1: install what is missing, build, and run the demo: `acc launch` starts 2 processes
# that train a small GPT-style model on the license texts Debian ships. Extra arguments go to the
# demo program (e.g. --steps 300). Output lands in out/demo/. A rank that dies makes acc launch start the job
# again (up to 3 times); it continues from its newest checkpoint in out/demo/checkpoints.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
# Only what the demo runs (the example, libacc and the launcher); scripts/test.sh builds the rest on top of it.
# The example first: ninja then starts LibTorch's precompiled header, the head of the longest chain, before the
# launcher's units, which fill the other core.
ninja -C build examples/train_gpt launcher/acc
exec build/launcher/acc launch --num_processes 2 --main_process_port 0 --max_restarts 3 build/examples/train_gpt "$@"
