#!/usr/bin/env python3
"""Runs the same data-parallel workload (a GPT, AdamW, processes on CPU with Gloo, one intra-op thread each) through
libacc, PyTorch DDP (default and fused AdamW) and Accelerate, or under FSDP beside PyTorch FSDP2, alternating them
over several rounds beside the machine's bound (the same per-process work in independent processes started
together), and prints throughput, efficiency against the bound, time per phase (data, forward, backward, the wait
for collectives, optimizer) and peak memory, with libacc's ratios to the others, for each model size asked for.

  bash bench/setup.sh && python3 bench/run.py [--sizes tiny,demo,large] [--rounds 5] [--strategy ddp|fsdp]
"""
import argparse
import contextlib
import datetime
import fcntl
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
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
IMPLS = {"libacc": "libacc", "pytorch-ddp": "PyTorch DDP", "pytorch-ddp-fused": "PyTorch DDP, fused AdamW",
         "pytorch-accelerate": "Accelerate", "pytorch-fsdp2": "PyTorch FSDP2",
         "pytorch-fsdp2-fused": "PyTorch FSDP2, fused AdamW", "libacc-noprefetch": "libacc without prefetch",
         "libacc-env": "libacc with --libacc-env", "libacc-baseline": "libacc, --baseline-build",
         "libacc-bound": "bound: libacc alone x N", "pytorch-bound": "bound: PyTorch alone x N",
         "pytorch-fused-bound": "bound: PyTorch fused alone x N"}
# The bound of an implementation: its own single-process program, N copies started together, no process group.
BOUND_OF = {"libacc": "libacc-bound", "libacc-noprefetch": "libacc-bound", "libacc-env": "libacc-bound",
            "libacc-baseline": "libacc-bound",
            "pytorch-ddp": "pytorch-bound", "pytorch-accelerate": "pytorch-bound", "pytorch-fsdp2": "pytorch-bound",
            "pytorch-ddp-fused": "pytorch-fused-bound", "pytorch-fsdp2-fused": "pytorch-fused-bound"}
BOUNDS = ("libacc-bound", "pytorch-bound", "pytorch-fused-bound")
DEFAULT_IMPLS = {"ddp": "libacc,pytorch-ddp,pytorch-ddp-fused,pytorch-accelerate," + ",".join(BOUNDS),
                 "fsdp": "libacc,pytorch-fsdp2,pytorch-fsdp2-fused," + ",".join(BOUNDS)}
# --strategy fsdp: libacc with this Accelerate config (FULL_SHARD, one unit per block), beside PyTorch's fully_shard.
FSDP_CONFIG = ("distributed_type: FSDP\nuse_cpu: true\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n"
               "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n")
# (libacc-noprefetch: FSDP1's FULL_SHARD without forward_prefetch or backward_prefetch, where FSDP2 prefetches.)
FSDP1_NO_PREFETCH = FSDP_CONFIG.replace("fsdp_version: 2\n  fsdp_reshard_after_forward: true",
                                        "fsdp_version: 1\n  fsdp_sharding_strategy: FULL_SHARD")
PHASES = ("data", "forward", "backward", "optimizer")
# The columns of the tables: forward and backward less the time the main thread was blocked in them, and that blocked
# time ("wait": DDP's all-reduce at the end of backward, FSDP's all-gathers and reduce-scatters) on its own.
COLUMNS = ("data", "forward", "backward", "wait", "optimizer")
# Before every run: how long the other processes' CPU use is sampled, and the longest wait for it to fall.
BUSY_WINDOW_S, BUSY_TIMEOUT_S = 1.0, 60.0


def model_args(size, steps, warmup):
    """The arguments gpt_step.c and gpt_step.py share: STEPS WARMUP BATCH SEQ VOCAB LAYERS HEADS EMBD."""
    s = SIZES[size]
    return [str(v) for v in (steps, warmup, s["batch"], s["seq"], s["vocab"], s["layers"], s["heads"], s["embd"])]


def launch_cmd(acc, procs, threads, program, config=None):
    return [acc, "launch", *(["--config_file", config] if config else ["--cpu"]), "--num_processes", str(procs),
            "--num_cpu_threads_per_process", str(threads), "--main_process_port", "0", *program]


def child_env(env):
    return dict(os.environ, ACC_CONFIG_FILE="none", BENCH_LOSSES="1", **(env or {}))


def result_of(program, p):
    if p.returncode != 0:
        sys.exit(f"{' '.join(program)} failed:\n{p.stdout}{p.stderr}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])


def run(acc, procs, threads, program, config=None, env=None, wrap=()):
    """config: an Accelerate config file for the run (instead of --cpu); env: more variables; wrap: a command that
    starts the launcher (perf record)."""
    p = subprocess.run([*wrap, *launch_cmd(acc, procs, threads, program, config)], capture_output=True, text=True,
                       env=child_env(env), timeout=3600)
    return result_of(program, p)


def run_bound(acc, procs, threads, program, env=None):
    """The machine's bound for a program: `procs` single-process runs of it started at once, each with the per-process
    batch and no process group. Its throughput is the sum of theirs (each over its own timed steps); `overlap` is the
    share of the span from the first start to the last end during which all of them were in their timed steps (they
    begin them together: gpt_step's BENCH_START_BARRIER)."""
    fd, barrier = tempfile.mkstemp(prefix="acc-bench-barrier-")
    os.close(fd)
    env = dict(env or {}, BENCH_START_BARRIER=f"{barrier}:{procs}")
    children = [subprocess.Popen(launch_cmd(acc, 1, threads, program), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=child_env(env)) for _ in range(procs)]
    results = []
    for c in children:
        out, err = c.communicate(timeout=3600)
        results.append(result_of(program, subprocess.CompletedProcess(c.args, c.returncode, out, err)))
    os.unlink(barrier)
    starts, ends = [r["window"][0] for r in results], [r["window"][1] for r in results]
    mean = lambda key, p: statistics.fmean(r[key][p] for r in results)
    return {**results[0], "impl": results[0]["impl"] + "-bound",
            "tokens_per_s": sum(r["tokens_per_s"] for r in results),
            "step_ms": statistics.fmean(r["step_ms"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            **{key: {p: mean(key, p) for p in PHASES} for key in ("phase_ms", "blocked_ms", "runq_ms")},
            "overlap": max(0.0, min(ends) - max(starts)) / (max(ends) - min(starts)),
            "processes": [{k: r[k] for k in ("tokens_per_s", "step_ms", "window")} for r in results]}


def columns(r):
    """One run's times per step in COLUMNS: forward and backward without their blocked time, which is `wait`."""
    ph, bl = r["phase_ms"], r["blocked_ms"]
    return {"data": ph["data"], "forward": ph["forward"] - bl["forward"], "backward": ph["backward"] - bl["backward"],
            "wait": bl["forward"] + bl["backward"], "optimizer": ph["optimizer"]}


# The machine's quiet: its load average, and the CPU the other processes use just before each run.
def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # all, idle + iowait


def busy_cores(seconds):
    """How many cores' worth of CPU the machine used over `seconds` (this process sleeps meanwhile)."""
    total0, idle0 = cpu_ticks()
    time.sleep(seconds)
    total1, idle1 = cpu_ticks()
    return os.cpu_count() * (1 - (idle1 - idle0) / max(total1 - total0, 1))


def wait_for_load(max_load, timeout):
    """Waits (up to `timeout` s) until the 1-minute load average is at most max_load; returns it and the wait."""
    start = time.monotonic()
    while (load := load_average()) > max_load and time.monotonic() - start < timeout:
        time.sleep(5)
    return load, time.monotonic() - start


def wait_for_idle(max_busy):
    """Before a run: waits (up to BUSY_TIMEOUT_S) until the other processes use at most max_busy cores."""
    start = time.monotonic()
    while (busy := busy_cores(BUSY_WINDOW_S)) > max_busy and time.monotonic() - start < BUSY_TIMEOUT_S:
        pass
    return {"busy_cores": round(busy, 3), "load1": load_average(), "waited_s": round(time.monotonic() - start, 1)}


@contextlib.contextmanager
def holding(lock):
    """The build lock (--lock), for one run: others' builds and tests wait for it, and proceed between runs."""
    if not lock:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def timed_run(a, acc, k, program, config, env):
    """One run of implementation k (a bound: its processes), after waiting for a quiet machine."""
    quiet = wait_for_idle(a.max_busy) if a.max_busy >= 0 else {
        "busy_cores": busy_cores(0.2), "load1": load_average(), "waited_s": 0}
    if k in BOUNDS:
        res = run_bound(acc, a.processes, a.threads, program, env)
    else:
        res = run(acc, a.processes, a.threads, program, config, env)
    res["quiet"] = quiet
    return res


def progress(res, k):
    c, quiet = columns(res), res["quiet"]
    return (f"{res['tokens_per_s']:9.0f} tokens/s  {res['step_ms']:9.3f} ms/step ("
            + ", ".join(f"{p} {c[p]:.3f}" for p in COLUMNS) + f", desched {sum(res['runq_ms'].values()):.3f})  "
            f"peak RSS {res['peak_rss_mb']:.0f} MB  threads {res['threads']}  before: {quiet['busy_cores']:.2f} cores "
            f"busy, load {quiet['load1']:.2f}" + (f", overlap {res['overlap']:.1%}" if k in BOUNDS else ""))


def write_json(path, everything):
    with open(path + ".tmp", "w") as f:
        json.dump(everything, f, indent=1)
    os.replace(path + ".tmp", path)


def describe(size):
    s = SIZES[size]
    return (f"{s['layers']} layers, {s['embd']} wide, {s['heads']} heads, vocab {s['vocab']}, "
            f"{s['batch']} x {s['seq']} tokens per process")


def fmt(v):
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def efficiencies(impls, results):
    """Per implementation (not a bound): tokens/s over its own bound's and over the fastest bound's, each the ratio of
    the medians with the range of the per-round ratios; None where the bound was not run."""
    med = {k: statistics.median(r["tokens_per_s"] for r in results[k]) for k in impls}
    bounds = [b for b in BOUNDS if b in impls]
    best = max(bounds, key=lambda b: med[b]) if bounds else None
    out = {}
    for k in impls:
        if k in BOUNDS:
            continue
        e = {}
        for which, b in (("own", BOUND_OF[k] if BOUND_OF[k] in impls else None), ("best", best)):
            if b:
                per_round = [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(results[k], results[b])]
                e[which] = (med[k] / med[b], min(per_round), max(per_round), b)
        # The fastest round of each over the fastest of its bound: others' work on a shared machine only slows a
        # run, so the best rounds are the closest to a quiet machine's figures.
        if BOUND_OF[k] in impls:
            top = lambda x: max(r["tokens_per_s"] for r in results[x])
            e["top"] = (top(k) / top(BOUND_OF[k]),)
        out[k] = e
    return out, best


def table(size, impls, results, procs, threads, steps, warmup, labels):
    """Markdown: medians over the rounds per implementation with its efficiencies, then libacc / other for every
    column."""
    med = {k: {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in results[k]),
               "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in results[k]),
               "step_ms": statistics.median(r["step_ms"] for r in results[k]),
               "runq": statistics.median(sum(r["runq_ms"].values()) for r in results[k]),
               **{c: statistics.median(columns(r)[c] for r in results[k]) for c in COLUMNS}} for k in impls}
    eff, best = efficiencies(impls, results)
    quiet = [r["quiet"] for k in impls for r in results[k]]
    overlaps = [r["overlap"] for k in impls if k in BOUNDS for r in results[k]]
    lines = [f"### {size}: {describe(size)}; {results[impls[0]][0]['parameters'] / 1e6:.2f} M parameters",
             "",
             f"{procs} processes x {threads} thread, median of {len(results[impls[0]])} alternated rounds of {steps} steps "
             f"(after {warmup} warm-up steps); times are ms per step of rank 0 (bounds: the mean of the processes); "
             "efficiency: tokens/s over the bound's, the implementation's own bound (its program alone in "
             f"{procs} independent processes) and the fastest bound ({labels.get(best, '-')}), with the range over the "
             "rounds; forward and backward exclude the time the main thread was blocked in them (wait: the "
             "collectives); desched: time runnable without a core, inside the phases. Before each run the other "
             f"processes used {min(q['busy_cores'] for q in quiet):.2f}-{max(q['busy_cores'] for q in quiet):.2f} "
             f"cores (load average {min(q['load1'] for q in quiet):.2f}-{max(q['load1'] for q in quiet):.2f})"
             + (f"; the bounds' processes overlapped {min(overlaps):.1%} or more of their span." if overlaps else "."),
             "",
             "| implementation | tokens/s | efficiency (own bound) | efficiency (fastest bound) | peak RSS (MB) | "
             "step (ms) | " + " | ".join(f"{c} (ms)" for c in COLUMNS) + " | desched (ms) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " | ---: |"]
    show = lambda e: f"{e[0]:.2f} ({e[1]:.2f}-{e[2]:.2f})" if e else "-"
    for k in impls:
        m = med[k]
        lines.append(f"| {labels[k]} | {m['tokens_per_s']:.0f} | {show(eff.get(k, {}).get('own'))} | "
                     f"{show(eff.get(k, {}).get('best'))} | {m['peak_rss_mb']:.0f} | {fmt(m['step_ms'])} | "
                     + " | ".join(fmt(m[c]) for c in COLUMNS) + f" | {fmt(m['runq'])} |")
    if "libacc" in impls:
        a = med["libacc"]
        ratio = lambda x, y: f"{x / y:.2f}" if y > 0.01 else "-"
        for k in impls:
            if k == "libacc" or k in BOUNDS:
                continue
            m = med[k]
            per_round = [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(results["libacc"], results[k])]
            lines.append(f"| libacc / {labels[k]} | {a['tokens_per_s'] / m['tokens_per_s']:.2f} "
                         f"({min(per_round):.2f}-{max(per_round):.2f}) | | | {a['peak_rss_mb'] / m['peak_rss_mb']:.2f} | "
                         f"{a['step_ms'] / m['step_ms']:.2f} | " + " | ".join(ratio(a[c], m[c]) for c in COLUMNS)
                         + f" | {ratio(a['runq'], m['runq'])} |")
    return "\n".join(lines)


def summary(rows, procs, labels):
    """One table for all sizes: each implementation's tokens/s and efficiencies."""
    lines = ["| size | implementation | tokens/s | efficiency (own bound) | efficiency (fastest bound) | "
             "best round / best bound round (own) |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for size, impls, results in rows:
        eff, _ = efficiencies(impls, results)
        for k in impls:
            e = eff.get(k, {})
            show = lambda w: f"{e[w][0]:.2f}" if w in e else "-"
            lines.append(f"| {size} | {labels[k]} | {statistics.median(r['tokens_per_s'] for r in results[k]):.0f} | "
                         f"{show('own')} | {show('best')} | {show('top')} |")
    return f"Summary ({procs} processes):\n\n" + "\n".join(lines)


def curves(impls, results, labels):
    """How far each implementation's loss curve (rank 0's loss at every step, first round) is from libacc's (the
    bounds' single processes train on other batches: left out)."""
    if "libacc" not in impls:
        return "", {}
    ours = results["libacc"][0]["losses"]
    lines, diffs = [], {}
    for k in impls:
        if k == "libacc" or k in BOUNDS:
            continue
        theirs = results[k][0]["losses"]
        diff = diffs[k] = max(abs(x - y) for x, y in zip(ours, theirs))
        rel = max(abs(x - y) / abs(y) for x, y in zip(ours, theirs))
        lines.append(f"Loss curves, libacc vs {labels[k]} from the same initial weights: {len(ours)} steps, loss "
                     f"{ours[0]:.4f} -> {ours[-1]:.4f} vs {theirs[0]:.4f} -> {theirs[-1]:.4f}; largest difference "
                     f"{diff:.3g} ({rel:.2%}).")
    return "\n\n" + "\n".join(lines), diffs


def perf_summary(data, window, top):
    """The top symbols (self time) and libraries of one `perf record` file, cut to the timed steps."""
    base = ["perf", "report", "-i", data, "--stdio", "--no-children", "--percent-limit", "0.5",
            "--time", f"{window[0]:.6f},{window[1]:.6f}"]
    out = {}
    for key, sort in (("symbols", "dso,sym"), ("libraries", "dso")):
        p = subprocess.run([*base, "--sort", sort], capture_output=True, text=True)
        rows = [line.strip() for line in p.stdout.splitlines() if re.match(r"\s*[0-9.]+%", line)]
        # C++ names at most 120 characters (their argument lists cut): enough to tell the kernels apart.
        short = lambda r: re.sub(r"\((?!anon)[^()]*\)(?=[^<>]*$)", "", r.replace("(anonymous namespace)", "(anon)"))
        # (TensorIterator loops: the kernel they run.)
        loop = lambda r: re.sub(r"c10::function_ref<.*?((?:\w+::)*\w+_kernel\w*).*", r"TensorIterator loop of \1", r)
        out[key] = [re.sub(r"\s+", " ", loop(short(r)))[:120] for r in rows[:top]]
    out["window"] = window
    return out


def git_commit():
    p = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="demo", help=f"comma-separated, of {', '.join(SIZES)} (default: demo)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: the size's own)")
    ap.add_argument("--warmup", type=int, help="warm-up steps per run (default: the size's own)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (OMP_NUM_THREADS)")
    ap.add_argument("--impls", default=None, help=f"comma-separated, of {', '.join(IMPLS)} (default: "
                    f"{DEFAULT_IMPLS['ddp']}; with --strategy fsdp: {DEFAULT_IMPLS['fsdp']}; with --libacc-env also "
                    "libacc-env)")
    ap.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                    help="fsdp: libacc under an FSDP FULL_SHARD config (a unit per block) beside PyTorch FSDP2")
    ap.add_argument("--libacc-env", action="append", default=[], metavar="KEY=VAL",
                    help="run libacc also with this variable set (repeatable), as the implementation libacc-env")
    ap.add_argument("--max-load", type=float, default=0.5,
                    help="before the first run, wait until the 1-minute load average is at most this (default 0.5; "
                    "a negative value does not wait)")
    ap.add_argument("--max-busy", type=float, default=0.2,
                    help=f"before every run, wait (up to {BUSY_TIMEOUT_S:.0f} s) until the machine used at most this "
                    "many cores over a second (default 0.2; negative: do not wait)")
    ap.add_argument("--quiet-timeout", type=float, default=600, help="the longest wait for --max-load (s)")
    ap.add_argument("--lock", help="hold this file's flock during each run (the shared build lock)")
    ap.add_argument("--lock-scope", choices=("run", "round"), default="run",
                    help="hold --lock for each run (default) or for each round of runs")
    ap.add_argument("--perf", metavar="DIR", help="after the rounds, one more run of each implementation but the "
                    "bounds under `perf record`, into DIR, and its top symbols over the timed steps")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the meson build directory")
    ap.add_argument("--gpt-step", help="the gpt_step binary (default: BUILD/bench/gpt_step)")
    ap.add_argument("--baseline-build", metavar="DIR", help="another build of libacc (DIR/launcher/acc and "
                    "DIR/bench/gpt_step, e.g. a copy made before a change) run as the implementation libacc-baseline, "
                    "alternated with the rest: a change measured against what it changed")
    ap.add_argument("--json", help="also write every run's result to this file")
    ap.add_argument("--check", type=float, metavar="TOL",
                    help="not a timing: exit 1 when a loss curve differs from libacc's by more than TOL, 77 (skipped) "
                    "without .venv-bench")
    a = ap.parse_args()
    if not os.path.exists(PY):
        sys.exit(77 if a.check is not None else f"{PY} is missing: run bash bench/setup.sh first")
    sizes = a.sizes.split(",")
    impls = (a.impls or DEFAULT_IMPLS[a.strategy] + (",libacc-env" if a.libacc_env else "")
             + (",libacc-baseline" if a.baseline_build else "")).split(",")
    for given, known in ((sizes, SIZES), (impls, IMPLS)):
        for x in given:
            if x not in known:
                sys.exit(f"unknown '{x}' (known: {', '.join(known)})")
    extra = {}
    for kv in a.libacc_env:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            sys.exit(f"--libacc-env '{kv}': expected KEY=VALUE")
        extra[key] = value
    if "libacc-env" in impls and not extra:
        sys.exit("libacc-env runs libacc with --libacc-env KEY=VALUE: give at least one")
    if "libacc-baseline" in impls and not a.baseline_build:
        sys.exit("libacc-baseline runs the build given by --baseline-build DIR: give it")
    labels = dict(IMPLS, **{"libacc-env": "libacc with " + " ".join(a.libacc_env),
                            "libacc-baseline": f"libacc, baseline build {a.baseline_build}"},
                  **{b: IMPLS[b].replace("x N", f"x {a.processes}") for b in BOUNDS})
    configs = {}
    if a.strategy == "fsdp":
        for k, text in (("libacc", FSDP_CONFIG), ("libacc-env", FSDP_CONFIG), ("libacc-baseline", FSDP_CONFIG),
                        ("libacc-noprefetch", FSDP1_NO_PREFETCH)):
            fd, configs[k] = tempfile.mkstemp(suffix=".yaml")
            with os.fdopen(fd, "w") as f:
                f.write(text)
    acc = os.path.join(a.build, "launcher", "acc")
    gpt_step = a.gpt_step or os.path.join(a.build, "bench", "gpt_step")
    # the launcher of each implementation: the baseline's own
    accs = {k: os.path.join(a.baseline_build, "launcher", "acc") if k == "libacc-baseline" else acc for k in impls}
    print(f"libacc {git_commit()}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} cores, strategy {a.strategy}", flush=True)
    if a.max_load >= 0:
        load, waited = wait_for_load(a.max_load, a.quiet_timeout)
        print(f"load average {load:.2f} after waiting {waited:.0f} s"
              + (f" (above --max-load {a.max_load}: timing anyway)" if load > a.max_load else ""), flush=True)
    tables, rows, everything, failed = [], [], {"commit": git_commit(), "strategy": a.strategy}, []
    for size in sizes:
        steps = a.steps or SIZES[size]["steps"]
        warmup = a.warmup if a.warmup is not None else SIZES[size]["warmup"]
        args = model_args(size, steps, warmup)
        script = os.path.join(ROOT, "bench", "gpt_step.py")
        programs = {
            "libacc": [gpt_step, *args], "libacc-noprefetch": [gpt_step, *args], "libacc-env": [gpt_step, *args],
            "libacc-bound": [gpt_step, *args],
            "libacc-baseline": [os.path.join(a.baseline_build or "", "bench", "gpt_step"), *args],
            **{k: [PY, script, k.removeprefix("pytorch-"), *args]
               for k in ("pytorch-ddp", "pytorch-ddp-fused", "pytorch-accelerate", "pytorch-fsdp2", "pytorch-fsdp2-fused")},
            "pytorch-bound": [PY, script, "single", *args], "pytorch-fused-bound": [PY, script, "single-fused", *args],
        }
        # Every implementation starts from libacc's initial weights (its GPT with seed 0: the same in every run),
        # so that their loss curves can be compared step by step.
        init = os.path.join(tempfile.mkdtemp(prefix="acc-bench-"), f"{size}-init.safetensors")
        envs = {k: (extra if k == "libacc-env" else {}) if k.startswith("libacc") else {"BENCH_LOAD_INIT": init}
                for k in impls}
        with holding(a.lock):
            run(acc, a.processes, a.threads, [gpt_step, *model_args(size, 1, 0)], None, {"BENCH_SAVE_INIT": init})
        print(f"{size}: {describe(size)}; {steps} timed steps after {warmup} warm-up", flush=True)
        results = {k: [] for k in impls}
        everything[size] = results
        for r in range(a.rounds):
            # Alternated, and the order turned every round, so that machine noise falls on all alike.
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            with holding(a.lock if a.lock_scope == "round" else None):
                for k in order:
                    with holding(a.lock if a.lock_scope == "run" else None):
                        results[k].append(timed_run(a, accs[k], k, programs[k], configs.get(k), envs[k]))
                    print(f"  round {r + 1}/{a.rounds} {k:19s} " + progress(results[k][-1], k), flush=True)
            if a.json:  # after every round: what was measured survives an interrupted run
                write_json(a.json, everything)
        counts = {k: v[0]["parameters"] for k, v in results.items()}
        if len(set(counts.values())) != 1:
            print(f"WARNING: the implementations' parameter counts differ: {counts}", flush=True)
        text, diffs = curves(impls, results, labels)
        failed += [f"{size}: {labels[k]} {d:.3g}" for k, d in diffs.items() if a.check is not None and not d <= a.check]
        profiles = {}
        if a.perf:
            os.makedirs(a.perf, exist_ok=True)
            with holding(a.lock):
                for k in impls:
                    if k in BOUNDS:
                        continue
                    data = os.path.join(a.perf, f"{a.strategy}-{size}-{k}.data")
                    res = run(accs[k], a.processes, a.threads, programs[k], configs.get(k), envs[k],
                              wrap=("perf", "record", "-q", "-F", "499", "-k", "CLOCK_MONOTONIC", "-o", data, "--"))
                    profiles[k] = perf_summary(data, res["window"], 12)
            text += "\n\n" + "\n\n".join(
                f"perf ({labels[k]}, all processes over rank 0's timed steps, self time), top symbols:\n"
                + "\n".join("    " + s for s in p["symbols"]) + "\n  by library: " + "; ".join(p["libraries"][:6])
                for k, p in profiles.items())
        tables.append(table(size, impls, results, a.processes, a.threads, steps, warmup, labels) + text)
        rows.append((size, impls, results))
        if profiles:
            everything[size + "-perf"] = profiles
    if a.json:
        write_json(a.json, everything)
    print("\n" + "\n\n".join(tables) + "\n\n" + summary(rows, a.processes, labels))
    if failed:
        sys.exit(f"loss curves further from libacc's than {a.check:g}: " + "; ".join(failed))


if __name__ == "__main__":
    main()
