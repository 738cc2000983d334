#!/usr/bin/env bash
# The GPU checks, run from a build made on another machine, on a CUDA machine that has PyTorch (with CUDA,
# transformers, peft and accelerate) but no compiler or meson: the GPU images these checks were run on.
#   scripts/gpu_check.sh BUILD_DIR OUT_DIR [LIBDIR [bench/gpu.py's options...]]
# BUILD_DIR is a build against the machine's own LibTorch version (docs/building.md, "A LibTorch other than the
# wheel's"); LIBDIR holds shared libraries the build machine had and this one lacks (yaml-cpp, protobuf-lite, RE2). Runs:
#   1. the gpu suite's programs (tests/gpu/meson.build);
#   2. bench/gpu.py: full and LoRA fine-tuning of the 124 M Llama against transformers + Accelerate and peft;
#   3. the C ABI tests that run on the default device, which is cuda:0 here (CPU-only machines run the same
#      programs on the CPU), and the demo's program on cuda:0 under `acc launch`, in float32 and bf16.
# Each step's output goes to OUT_DIR/<step>.log; a summary line per step to stdout; the exit status counts failures.
set -uo pipefail
build=$(cd "$1" && pwd) out=$2 extra=${3:-}
shift $(($# < 3 ? $# : 3))
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="${extra:+$extra:}$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ACC_CONFIG_FILE=none PYTHONUNBUFFERED=1
failed=0
step() {  # step NAME TIMEOUT command...: runs it, logs to OUT/NAME.log, prints one line
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local verdict=ok
  ((rc == 77)) && verdict=skipped
  ((rc != 0 && rc != 77)) && { verdict="FAILED (exit $rc)"; failed=$((failed + 1)); }
  echo "$name: $verdict in $((SECONDS - t0)) s; $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out/$name.log" | tail -1)"
  if ((rc != 0 && rc != 77)); then tail -n 12 "$out/$name.log" | cut -c1-400 | sed 's/^/    /'; fi
}

{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'; } \
  >"$out/machine.log" 2>&1
cat "$out/machine.log"
t=$build/tests/gpu/test_gpu
step gpu-cpu-fallback 120 "$t" fallback 1
step gpu-cuda-single 120 "$t" single
step gpu-checkpoint-rng 120 "$t" checkpoint_rng
step gpu-precision 180 "$t" precision
step gpu-nccl-ddp 120 "$t" nccl
step gpu-plugin-missing 60 env ACC_CUDA_PLUGIN=/nonexistent/libacc_cuda.so "$t" broken "no CUDA plugin at /nonexistent"
step gpu-plugin-foreign-library 60 env ACC_CUDA_PLUGIN="$build/tests/gpu/libforeign_library.so" "$t" broken \
  "is not a libacc CUDA plugin"
touch "$build"/bench/*  # newer than their sources: bench/common.py's binary() takes them as built
step bench-gpu 400 python3 "$root/bench/gpu.py" --build "$build" --json "$out/bench-gpu.json" "$@"
echo "--- bench/gpu.py"; cat "$out/bench-gpu.log"
for c in capi loop data checkpoint bigmodel; do step "cuda-$c" 120 "$build/tests/c/test_$c"; done
step cuda-hf 120 "$build/tests/c/test_hf" "$root/tests/hf/fixtures"
step cuda-adapter 120 "$build/tests/c/test_adapter" "$root"
for mp in no bf16; do
  step "demo-$mp" 150 "$build/launcher/acc" launch --num_processes 1 "$build/examples/train_gpt" --steps 300 \
    --mixed-precision "$mp" --out "$out/demo-$mp"
done
echo "$failed step(s) failed"
exit $((failed > 0))
