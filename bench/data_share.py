#!/usr/bin/env python3
"""Is the data pipeline ever the bottleneck of a training step? (issue 39 item 6.) Runs examples/c/chat_sft (its
dataset from examples/data/chat_sft.jsonl through acc_dataset_from_files: TRL's SFT preparation, TRL's collator) on
2 processes under acc launch with --profile, which records 20 steps with the profiler, and reads each process's Chrome
trace: the time in libacc's `acc::data` range (the loader's next batch: collating its rows into tensors) against the
time of the recorded steps (their ProfilerStep#N markers), per process.

  python3 bench/data_share.py [--build build] [--steps 40] [--batch 16]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def share(trace_path):
    """(steps, step milliseconds, acc::data milliseconds) of one trace's recorded steps."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    steps = [e for e in spans if e["name"].startswith("ProfilerStep#")]
    data = [e for e in spans if e["name"] == "acc::data"]
    inside = [d for d in data if any(s["ts"] <= d["ts"] <= s["ts"] + s["dur"] for s in steps)]
    return len(steps), sum(s["dur"] for s in steps) / 1e3, sum(d["dur"] for d in inside) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cmd = [os.path.join(a.build, "launcher", "acc"), "launch", "--cpu", "--num_processes", "2",
               os.path.join(a.build, "examples", "chat_sft"), "--steps", str(a.steps), "--batch", str(a.batch),
               "--out", os.path.join(d, "out"), "--profile", os.path.join(d, "traces"),
               "--data", os.path.join(ROOT, "examples", "data", "chat_sft.jsonl")]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            sys.exit(f"chat_sft failed:\n{p.stdout}\n{p.stderr}")
        worst = 0.0
        for rank in (0, 1):
            n, step_ms, data_ms = share(os.path.join(d, "traces", f"profile_{rank}.json"))
            if n == 0:
                sys.exit(f"process {rank}'s trace has no recorded step")
            pct = 100 * data_ms / step_ms
            worst = max(worst, pct)
            print(f"process {rank}: {n} steps, {step_ms / n:.2f} ms a step, acc::data {data_ms / n:.3f} ms a step "
                  f"({pct:.2f}% of the step)")
        print(f"acc::data: at most {worst:.2f}% of a step (target: under 5%)")


if __name__ == "__main__":
    main()
