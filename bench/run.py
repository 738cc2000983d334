#!/usr/bin/env python3
"""Runs the same DDP workload (a GPT, AdamW, processes on CPU with Gloo, one intra-op thread each) through
libacc, PyTorch DDP and Accelerate, alternating them over several rounds, and prints throughput, time per
phase (data, forward, backward, optimizer) and peak memory with libacc's ratios to the others, for each
model size asked for.

  bash bench/setup.sh && python3 bench/run.py [--sizes tiny,demo,large] [--rounds 5] [--steps N]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")

# The model sizes, each defined once: libacc's built-in GPT spec (vocab_size, block_size = seq, n_layer,
# n_head, n_embd), the batch per process, and the timed and warm-up steps of one run.
SIZES = {
    "tiny": dict(layers=2, embd=32, heads=2, vocab=256, seq=64, batch=16, steps=300, warmup=30),
    "demo": dict(layers=4, embd=128, heads=4, vocab=256, seq=64, batch=16, steps=100, warmup=10),
    "large": dict(layers=8, embd=512, heads=8, vocab=256, seq=128, batch=8, steps=20, warmup=3),
}
IMPLS = {"libacc": "libacc", "pytorch-ddp": "PyTorch DDP", "pytorch-accelerate": "Accelerate",
         "pytorch-fsdp2": "PyTorch FSDP2",
         "libacc-noprefetch": "libacc without prefetch"}
# --strategy fsdp: libacc with this Accelerate config (FULL_SHARD, one unit per block), beside PyTorch's fully_shard.
FSDP_CONFIG = ("distributed_type: FSDP\nuse_cpu: true\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n"
               "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n")
# (libacc-noprefetch: FSDP1's FULL_SHARD without forward_prefetch or backward_prefetch, where FSDP2 prefetches.)
FSDP1_NO_PREFETCH = FSDP_CONFIG.replace("fsdp_version: 2\n  fsdp_reshard_after_forward: true",
                                        "fsdp_version: 1\n  fsdp_sharding_strategy: FULL_SHARD")
PHASES = ("data", "forward", "backward", "optimizer")


def model_args(size, steps, warmup):
    """The arguments gpt_step.c and gpt_step.py share: STEPS WARMUP BATCH SEQ VOCAB LAYERS HEADS EMBD."""
    s = SIZES[size]
    return [str(v) for v in (steps, warmup, s["batch"], s["seq"], s["vocab"], s["layers"], s["heads"], s["embd"])]


def run(acc, procs, threads, program, config=None, env=None):
    """config: an Accelerate config file for the run (instead of --cpu); env: more variables."""
    cmd = [acc, "launch", *(["--config_file", config] if config else ["--cpu"]), "--num_processes", str(procs),
           "--num_cpu_threads_per_process", str(threads), "--main_process_port", "0", *program]
    env = dict(os.environ, ACC_CONFIG_FILE="none", BENCH_LOSSES="1", **(env or {}))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"{' '.join(program)} failed:\n{p.stdout}{p.stderr}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])


def describe(size):
    s = SIZES[size]
    return (f"{s['layers']} layers, {s['embd']} wide, {s['heads']} heads, vocab {s['vocab']}, "
            f"{s['batch']} x {s['seq']} tokens per process")


def table(size, impls, results, procs, threads, steps, warmup):
    """Markdown: medians over the rounds per implementation, then libacc / other for every column."""
    med = {k: {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in results[k]),
               "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in results[k]),
               "step_ms": statistics.median(r["step_ms"] for r in results[k]),
               **{p: statistics.median(r["phase_ms"][p] for r in results[k]) for p in PHASES}} for k in impls}
    lines = [f"### {size}: {describe(size)}; {results[impls[0]][0]['parameters'] / 1e6:.2f} M parameters",
             "",
             f"{procs} processes x {threads} thread, median of {len(results[impls[0]])} alternated rounds of {steps} steps "
             f"(after {warmup} warm-up steps); "
             "times are ms per step of rank 0; ratio rows are libacc / other for every column (speed: above 1 "
             "is libacc faster; times and memory: below 1 is libacc faster or smaller), the tokens/s ratio with "
             "its range over the rounds.",
             "",
             "| implementation | tokens/s | peak RSS (MB) | step (ms) | " + " | ".join(f"{p} (ms)" for p in PHASES) + " |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in PHASES) + " |"]
    fmt = lambda v: f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"
    for k in impls:
        m = med[k]
        lines.append(f"| {IMPLS[k]} | {m['tokens_per_s']:.0f} | {m['peak_rss_mb']:.0f} | {fmt(m['step_ms'])} | "
                     + " | ".join(fmt(m[p]) for p in PHASES) + " |")
    if "libacc" in impls:
        a = med["libacc"]
        for k in impls:
            if k == "libacc":
                continue
            m = med[k]
            per_round = [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(results["libacc"], results[k])]
            lines.append(f"| libacc / {IMPLS[k]} | {a['tokens_per_s'] / m['tokens_per_s']:.2f} "
                         f"({min(per_round):.2f}-{max(per_round):.2f}) | {a['peak_rss_mb'] / m['peak_rss_mb']:.2f} | "
                         f"{a['step_ms'] / m['step_ms']:.2f} | "
                         + " | ".join(f"{a[p] / m[p]:.2f}" for p in PHASES) + " |")
    return "\n".join(lines)


def curves(impls, results):
    """How far each implementation's loss curve (rank 0's loss at every step, first round) is from libacc's."""
    if "libacc" not in impls:
        return ""
    ours = results["libacc"][0]["losses"]
    lines = []
    for k in impls:
        if k == "libacc":
            continue
        theirs = results[k][0]["losses"]
        diff = max(abs(x - y) for x, y in zip(ours, theirs))
        rel = max(abs(x - y) / abs(y) for x, y in zip(ours, theirs))
        lines.append(f"Loss curves, libacc vs {IMPLS[k]} from the same initial weights: {len(ours)} steps, loss "
                     f"{ours[0]:.4f} -> {ours[-1]:.4f} vs {theirs[0]:.4f} -> {theirs[-1]:.4f}; largest difference "
                     f"{diff:.3g} ({rel:.2%}).")
    return "\n\n" + "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="demo", help=f"comma-separated, of {', '.join(SIZES)} (default: demo)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: the size's own)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per run (default: the size's own)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (OMP_NUM_THREADS)")
    ap.add_argument("--impls", default=None, help=f"comma-separated, of {', '.join(IMPLS)} (default: libacc, "
                    "pytorch-ddp, pytorch-accelerate; with --strategy fsdp: libacc, pytorch-fsdp2)")
    ap.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                    help="fsdp: libacc under an FSDP FULL_SHARD config (a unit per block) beside PyTorch FSDP2")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the meson build directory")
    ap.add_argument("--gpt-step", help="the gpt_step binary (default: BUILD/bench/gpt_step)")
    ap.add_argument("--json", help="also write every run's result to this file")
    a = ap.parse_args()
    sizes = a.sizes.split(",")
    impls = (a.impls or ("libacc,pytorch-fsdp2" if a.strategy == "fsdp" else "libacc,pytorch-ddp,pytorch-accelerate")
             ).split(",")
    configs = {}
    if a.strategy == "fsdp":
        for k, text in (("libacc", FSDP_CONFIG), ("libacc-noprefetch", FSDP1_NO_PREFETCH)):
            fd, configs[k] = tempfile.mkstemp(suffix=".yaml")
            with os.fdopen(fd, "w") as f:
                f.write(text)
    for given, known in ((sizes, SIZES), (impls, IMPLS)):
        for x in given:
            if x not in known:
                sys.exit(f"unknown '{x}' (known: {', '.join(known)})")
    acc = os.path.join(a.build, "launcher", "acc")
    gpt_step = a.gpt_step or os.path.join(a.build, "bench", "gpt_step")
    tables, everything = [], {}
    for size in sizes:
        steps = a.steps or SIZES[size]["steps"]
        warmup = a.warmup if a.warmup is not None else SIZES[size]["warmup"]
        args = model_args(size, steps, warmup)
        programs = {
            "libacc": [gpt_step, *args],
            "pytorch-ddp": [PY, os.path.join(ROOT, "bench", "gpt_step.py"), "ddp", *args],
            "pytorch-accelerate": [PY, os.path.join(ROOT, "bench", "gpt_step.py"), "accelerate", *args],
            "pytorch-fsdp2": [PY, os.path.join(ROOT, "bench", "gpt_step.py"), "fsdp2", *args],
            "libacc-noprefetch": [gpt_step, *args],
        }
        # Every implementation starts from libacc's initial weights (its GPT with seed 0: the same in every run),
        # so that their loss curves can be compared step by step.
        init = os.path.join(tempfile.mkdtemp(prefix="acc-bench-"), f"{size}-init.safetensors")
        run(acc, a.processes, a.threads, [gpt_step, *model_args(size, 1, 0)], None, {"BENCH_SAVE_INIT": init})
        print(f"{size}: {describe(size)}; {steps} timed steps after {warmup} warm-up", flush=True)
        results = {k: [] for k in impls}
        for r in range(a.rounds):
            # Alternated, and the order turned every round, so that machine noise falls on all alike.
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            for k in order:
                res = run(acc, a.processes, a.threads, programs[k], configs.get(k),
                          None if k.startswith("libacc") else {"BENCH_LOAD_INIT": init})
                results[k].append(res)
                print(f"  round {r + 1}/{a.rounds} {k:19s} {res['tokens_per_s']:9.0f} tokens/s  "
                      f"{res['step_ms']:9.3f} ms/step (" + ", ".join(f"{p} {res['phase_ms'][p]:.3f}" for p in PHASES)
                      + f")  peak RSS {res['peak_rss_mb']:.0f} MB  threads {res['threads']}", flush=True)
        counts = {k: v[0]["parameters"] for k, v in results.items()}
        if len(set(counts.values())) != 1:
            print(f"WARNING: the implementations' parameter counts differ: {counts}", flush=True)
        tables.append(table(size, impls, results, a.processes, a.threads, steps, warmup) + curves(impls, results))
        everything[size] = results
    if a.json:
        with open(a.json, "w") as f:
            json.dump(everything, f, indent=1)
    print("\n" + "\n\n".join(tables))


if __name__ == "__main__":
    main()
