#!/usr/bin/env python3
"""Checkpoint benchmark: save_state and load_state of the same model (an MLP of square float32 linear layers,
about --params parameters) with AdamW state after one step, through libacc (bench/checkpoint_step.c, the C ABI)
and through Accelerate (bench/checkpoint_step.py), in one process each, alternated over rounds, beside `dd`'s
sequential write (conv=fsync) and read of a file of the checkpoint's size in the same rounds. Loads are timed
right after the save (Accelerate's files still in the page cache; libacc writes large files around it, with
O_DIRECT) and, when the page cache can be dropped (root), cold. Prints a markdown table of medians and libacc's ratios.

  bash bench/setup.sh && python3 bench/checkpoint.py [--params 250M] [--rounds 3] [--dir DIR]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import binary, can_drop_caches, run  # noqa: E402


def parse_count(s):
    m = re.fullmatch(r"([0-9.]+)([kKmMgG]?)", s)
    if not m:
        raise argparse.ArgumentTypeError(f"not a count: {s}")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])








def dd(path, nbytes, drop):
    """Sequential write (16 MiB blocks, fsync before dd exits) and read back of nbytes: seconds each."""
    count = max(1, round(nbytes / (16 << 20)))
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=16M", f"count={count}", "conv=fsync"],
                   check=True, capture_output=True)
    write = time.perf_counter() - t
    result = {"bytes": count * (16 << 20), "write_s": write}
    for kind in ("warm", "cold") if drop else ("warm",):
        if kind == "cold":
            can_drop_caches()
        t = time.perf_counter()
        subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M"], check=True, capture_output=True)
        result[f"read_{kind}_s"] = time.perf_counter() - t
    os.remove(path)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=parse_count, default=parse_count("250M"),
                    help="model parameters (float32), rounded to whole layers: 250M is about 1 GB")
    ap.add_argument("--width", type=int, default=4096, help="width of the square linear layers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-checkpoint"),
                    help="directory on the disk to measure: the runs write under DIR/scratch, removed after each")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of both sides")
    args = ap.parse_args()
    width = args.width
    layers = max(1, round(args.params / (width * width + width)))
    parameters = layers * (width * width + width)
    estimate = parameters * 4 * 3  # weights, exp_avg, exp_avg_sq
    scratch = os.path.join(args.dir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    free = shutil.disk_usage(scratch).free
    if free < 2 * estimate + (1 << 30):
        sys.exit(f"{free / 1e9:.1f} GB free under {scratch}, a checkpoint of {parameters / 1e6:.0f} M parameters takes "
                 f"about {estimate / 1e9:.1f} GB: ask for fewer --params")
    exe = binary(args.build, "checkpoint_step")
    drop = can_drop_caches()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), ACC_CONFIG_FILE="none")
    ckpt = os.path.join(scratch, "ckpt")

    def clean():
        for d in (ckpt, ckpt + ".tmp", ckpt + ".old"):
            shutil.rmtree(d, ignore_errors=True)

    commands = {"libacc": [exe, str(width), str(layers), ckpt, str(int(drop))],
                "accelerate": [PY, os.path.join(ROOT, "bench", "checkpoint_step.py"), str(width), str(layers), ckpt,
                               str(int(drop))]}
    results = {"libacc": [], "accelerate": [], "dd": []}
    for r in range(args.rounds):
        order = ["libacc", "accelerate"] if r % 2 == 0 else ["accelerate", "libacc"]
        for impl in order:
            clean()
            results[impl].append(run(commands[impl], env))
            clean()
            print(f"round {r + 1} {impl}: {json.dumps(results[impl][-1])}", file=sys.stderr)
        results["dd"].append(dd(os.path.join(scratch, "dd.bin"), results["libacc"][-1]["bytes"], drop))
        print(f"round {r + 1} dd: {json.dumps(results['dd'][-1])}", file=sys.stderr)
    shutil.rmtree(scratch, ignore_errors=True)

    a, b = results["libacc"], results["accelerate"]
    if a[0]["parameters"] != b[0]["parameters"]:
        sys.exit(f"parameter counts differ: libacc {a[0]['parameters']}, Accelerate {b[0]['parameters']}")
    med = lambda rs, k: statistics.median(x[k] for x in rs)
    loads = ["load_warm_s", "load_cold_s"] if drop else ["load_warm_s"]
    cols = ["save_s", "save_sync_s"] + loads
    names = {"save_s": "save (returns)", "save_sync_s": "save + sync (on disk)", "load_warm_s": "load right after the save", "load_cold_s": "load, cold cache"}
    ddcol = {"save_s": "write_s", "save_sync_s": "write_s", "load_warm_s": "read_warm_s", "load_cold_s": "read_cold_s"}
    mb = lambda nbytes, s: nbytes / s / 1e6
    print(f"### {parameters / 1e6:.1f} M parameters ({layers} x Linear({width}, {width}), float32) + AdamW state\n")
    print(f"One process, {args.threads} threads, median of {args.rounds} alternated rounds; checkpoint "
          f"{a[0]['bytes'] / 1e9:.2f} GB (libacc) / {b[0]['bytes'] / 1e9:.2f} GB (Accelerate); dd moves "
          f"{results['dd'][0]['bytes'] / 1e9:.2f} GB in 16 MiB blocks (write with conv=fsync). Cold loads follow "
          f"`sync; echo 3 > /proc/sys/vm/drop_caches`{'' if drop else ' (not possible here: warm only)'}.\n")
    print("| operation | libacc (s) | Accelerate (s) | libacc / Accelerate | libacc MB/s | Accelerate MB/s | dd MB/s | libacc / dd |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in cols:
        ta, tb, td = med(a, c), med(b, c), med(results["dd"], ddcol[c])
        ratios = [x[c] / y[c] for x, y in zip(a, b)]
        ma, mbb, md = mb(a[0]["bytes"], ta), mb(b[0]["bytes"], tb), mb(results["dd"][0]["bytes"], td)
        print(f"| {names[c]} | {ta:.2f} | {tb:.2f} | {ta / tb:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | {ma:.0f} | "
              f"{mbb:.0f} | {md:.0f} | {ma / md:.2f} |")
    print()
    print("raw: " + json.dumps(results))


if __name__ == "__main__":
    main()
