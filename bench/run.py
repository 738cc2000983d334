#!/usr/bin/env python3
"""Runs the same DDP workload (the demo's GPT, batch 16 x 64 tokens per process, AdamW, 2 processes on
CPU with Gloo) through libacc, PyTorch DDP and Accelerate, alternating them over several rounds, and
prints throughput and peak memory with libacc's ratios to the others.

  bash bench/setup.sh && python3 bench/run.py [--steps 100] [--rounds 3] [--processes 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")


def run(acc, procs, program):
    cmd = [acc, "launch", "--cpu", "--num_processes", str(procs), "--main_process_port", "0", *program]
    env = dict(os.environ, ACC_CONFIG_FILE="none")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"{' '.join(program)} failed:\n{p.stdout}{p.stderr}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the meson build directory")
    a = ap.parse_args()
    acc = os.path.join(a.build, "launcher", "acc")
    programs = {
        "libacc": [os.path.join(a.build, "bench", "gpt_step"), str(a.steps)],
        "pytorch-ddp": [PY, os.path.join(ROOT, "bench", "gpt_step.py"), "ddp", str(a.steps)],
        "pytorch-accelerate": [PY, os.path.join(ROOT, "bench", "gpt_step.py"), "accelerate", str(a.steps)],
    }
    results = {k: [] for k in programs}
    for r in range(a.rounds):
        for name, program in programs.items():
            res = run(acc, a.processes, program)
            results[name].append(res)
            print(f"round {r + 1}/{a.rounds}  {name:20s} {res['tokens_per_s']:10.0f} tokens/s  "
                  f"peak RSS {res['peak_rss_mb']:.0f} MB (rank 0)", flush=True)
    tps = {k: statistics.median(x["tokens_per_s"] for x in v) for k, v in results.items()}
    rss = {k: statistics.median(x["peak_rss_mb"] for x in v) for k, v in results.items()}
    print(f"\nmedian of {a.rounds} rounds, {a.processes} processes, {a.steps} timed steps each:")
    print(f"{'implementation':20s} {'tokens/s':>10s} {'libacc speed ratio':>19s} {'peak RSS MB':>12s} {'libacc memory ratio':>20s}")
    for k in programs:
        print(f"{k:20s} {tps[k]:10.0f} {tps['libacc'] / tps[k]:19.2f} {rss[k]:12.0f} {rss['libacc'] / rss[k]:20.2f}")


if __name__ == "__main__":
    main()
