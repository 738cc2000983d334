#!/usr/bin/env python3
"""Pipeline parallelism side by side: the same LlamaForCausalLM (random weights saved once by transformers, as
bench/tp.py) trained with AdamW on 2 CPU processes, one pipeline stage each (pp=2, the model cut at the same block;
the interleaved schedules --stages-per-rank stages each, cut as libacc balances them),
by libacc (bench/tp_step.cpp through the C ABI under `acc launch`, the pipeline from the variables accelerate launch
exports: PARALLELISM_CONFIG_PP_SIZE, _PP_MICROBATCHES, _PP_SCHEDULE, _PP_SPLIT_POINTS) and by
torch.distributed.pipelining (bench/pipeline_step.py: PipelineStage with ScheduleGPipe, Schedule1F1B,
ScheduleInterleaved1F1B or ScheduleInterleavedZeroBubble over Gloo, under torchrun), for each schedule and number of micro-batches, alternated over rounds (their order turns every
round). Prints tokens/s of each and libacc / torch. Beside them, each implementation's single process training the
whole model on the same batch, at once (T_1) and as the step's micro-batches one after the other (T_mb): the bubble is
1 - T_ideal / T_step with T_ideal = T_1 / p (p = 2), printed with 1 - (T_mb / p) / T_step (what is left once the
micro-batches' own cost is taken out) beside the theory (p-1)/(m+p-1) (interleaved: (p-1)/(vm+p-1)). --candidate-build DIR runs a second libacc
build (a change to the pipeline) beside them.

  bash bench/setup.sh && python3 bench/pipeline.py [--size default|small] [--schedules GPipe,1F1B]
      [--microbatches 4,8,16] [--rounds 3] [--lock /tmp/acc-build.lock] [--candidate-build DIR]
      [--schedules Interleaved1F1B,InterleavedZeroBubble --stages-per-rank 2]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tp  # noqa: E402  (its save_model and number format)
from common import run_ranks  # noqa: E402
from run import holding, wait_for_idle  # noqa: E402  (run.py's build lock and its quiet-machine check)

PY = os.path.join(ROOT, ".venv-bench", "bin", "python")
TORCHRUN = os.path.join(ROOT, ".venv-bench", "bin", "torchrun")
P = 2  # pipeline stages, one per process

# Each size once: the LlamaConfig (float32, untied head), the batch (split into the micro-batches: a multiple of each
# of them), the steps.
SIZES = {
    "small": dict(config=dict(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2),
                  batch=16, seq=32, warmup=1, steps=3),
    "default": dict(config=dict(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=8,
                                num_attention_heads=8, num_key_value_heads=4),
                    batch=16, seq=64, warmup=2, steps=10),
}
IMPLS = {"libacc": "libacc", "libacc-candidate": "libacc, candidate build", "pytorch": "torch.distributed.pipelining"}
SHORT = {"libacc": "libacc", "libacc-candidate": "candidate", "pytorch": "torch"}  # in the tables' column heads
LIBACC = ("libacc", "libacc-candidate")  # run by bench/tp_step.cpp under acc launch


MULTI = ("Interleaved1F1B", "InterleavedZeroBubble")  # several stages per rank (--stages-per-rank)


def balanced_splits(layers, stages):
    """The blocks stages 1, 2, ... begin with in libacc's default cut (pp::balanced_stages, torchtitan's: the embedding
    and the head each count as a block, the first stages taking one more where the count does not divide)."""
    effective = layers + 2
    per, extra = divmod(effective, stages)
    out, begin = [], 0
    for s in range(stages - 1):
        begin += per + (1 if s < extra else 0) - (1 if s == 0 else 0)
        out.append(begin)
    return out


def stages_per_rank(a, schedule):
    return a.stages_per_rank if schedule in MULTI else 1


def splits(a, schedule):
    """The split points of `schedule`'s stages, as both sides take them ("4" or "2,5,7")."""
    if schedule not in MULTI:
        return str(a.split)
    return ",".join(map(str, balanced_splits(a.layers, P * a.stages_per_rank)))


def theory(a, schedule, m):
    """The bubble of pipeline_schedule.hpp's bubble_fraction: (p-1)/(m+p-1) (GPipe, 1F1B), (p-1)/(vm+p-1)
    (Interleaved1F1B); none for zero bubble, whose gain depends on the weight gradients' cost."""
    if schedule == "InterleavedZeroBubble":
        return None
    return (P - 1) / (stages_per_rank(a, schedule) * m + P - 1)


def launch(a, impl, schedule, m, size, model_dir, batch=None, steps=None):
    """One run: 2 processes pipelined (schedule, m), or one process with the whole model (schedule None; `batch`
    sequences a step instead of the size's, `steps` timed steps); rank 0's result with every rank's losses."""
    out = tempfile.mkdtemp(prefix="run-", dir=a.dir)
    c = size["config"]
    tail = [str(c["vocab_size"]), str(batch or size["batch"]), str(size["seq"]), str(size["warmup"]),
            str(steps or size["steps"]), str(a.lr)]
    procs = 1 if schedule is None else P
    env = dict(os.environ, ACC_CONFIG_FILE="none", TRANSFORMERS_VERBOSITY="error", BENCH_OUT=out,
               OMP_NUM_THREADS=str(a.threads))
    if impl in LIBACC:
        acc, tp_step = a.builds[impl]
        # tp_step's DP_SHARD 1 x TP P: both ranks are data-parallel rank 0 (the same batch), as the pipeline needs.
        cmd = [acc, "launch", "--cpu", "--num_processes", str(procs), "--num_cpu_threads_per_process",
               str(a.threads), "--main_process_port", "0", tp_step, model_dir, "1", str(procs), *tail]
        if schedule is not None:
            env.update(ACCELERATE_USE_PARALLELISM_CONFIG="true", PARALLELISM_CONFIG_PP_SIZE=str(P),
                       PARALLELISM_CONFIG_PP_MICROBATCHES=str(m), PARALLELISM_CONFIG_PP_SCHEDULE=schedule,
                       PARALLELISM_CONFIG_PP_SPLIT_POINTS=splits(a, schedule),
                       PARALLELISM_CONFIG_PP_STAGES_PER_RANK=str(stages_per_rank(a, schedule)))
    else:
        step = os.path.join(ROOT, "bench", "pipeline_step.py")
        args = [model_dir, schedule or "single", str(m or 1), splits(a, schedule) if schedule else "0", *tail]
        env["BENCH_ADAMW"] = a.torch_adamw
        cmd = ([PY, step, *args] if schedule is None else
               [TORCHRUN, "--standalone", "--nnodes", "1", "--nproc_per_node", str(P), step, *args])
    ranks = run_ranks(cmd, env, out, procs)
    result = ranks[0]
    result["rank_losses"] = [x["losses"] for x in ranks]
    result["rank_local_parameters"] = [x["local_parameters"] for x in ranks]
    return result


def timed(a, impl, schedule, m, size, model_dir, label, batch=None, steps=None):
    quiet = wait_for_idle(a.max_busy) if a.max_busy >= 0 else {
        "busy_cores": -1.0, "load1": os.getloadavg()[0], "waited_s": 0}
    t = time.monotonic()
    r = launch(a, impl, schedule, m, size, model_dir, batch, steps)
    r["quiet"] = quiet
    print(f"  {label} {IMPLS[impl]:29.29s} {r['tokens_per_s']:8.1f} tokens/s, {r['step_ms']:7.1f} ms/step ("
          + ", ".join(f"{k} {v:.1f}" for k, v in r["phase_ms"].items()) + f"), peak RSS {r['peak_rss_mb']:.0f} MB; "
          f"{time.monotonic() - t:.0f} s; before: {quiet['busy_cores']:.2f} cores busy, load {quiet['load1']:.2f}",
          file=sys.stderr, flush=True)
    return r


def loss_difference(runs, reference):
    """The largest relative difference of any rank's loss at any step, over the runs, from the reference curve."""
    rel = 0.0
    for r in runs:
        for curve in r["rank_losses"]:
            if len(curve) != len(reference):
                sys.exit("the loss curves differ in length")
            rel = max(rel, max(abs(x - y) / abs(y) for x, y in zip(curve, reference)))
    return rel


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def phase(runs, name):
    return statistics.median(r["phase_ms"][name] for r in runs)


def report(a, size, cases, results, singles, mbs):
    c = size["config"]
    tokens = size["batch"] * size["seq"]
    impls = [k for k in IMPLS if k in a.impls]
    # Ratios against torch, of each libacc build that ran.
    ours = [k for k in LIBACC if k in impls] if "pytorch" in impls else []
    print(f"\n### {a.threads} thread per process, {size['batch']} x {size['seq']} tokens per step (the micro-batches: "
          f"the batch split along dim 0), {size['steps']} timed steps after {size['warmup']}; median of {a.rounds} "
          f"alternated rounds; the model cut before block {a.split} of {c['num_hidden_layers']} (interleaved, "
          f"{a.stages_per_rank} stages per rank: before blocks {splits(a, MULTI[0])}); ms are rank 0's per step" + (f"; candidate build: {a.candidate_build}" if "libacc-candidate" in impls else "") + "\n")
    # T_1: one process, the whole model, the whole batch at once; T_mb: the same process over the step's micro-batches
    # one after the other (m forward + backward of batch / m sequences, one optimizer step).
    t1, tmb = {}, {}
    print("Single process, the whole model: T_1 the whole batch at once (the bubble's T_ideal is T_1 / 2), and T_mb "
          "the same batch as m micro-batches one after the other (m x forward + backward of a batch / m run, plus the "
          "whole batch's optimizer step): what micro-batching alone costs.\n")
    print("| implementation | tokens/s, whole batch | T_1 (ms) | forward (ms) | backward (ms) | optimizer (ms) | "
          + " | ".join(f"T_mb, m={m} (ms)" for m in mbs) + " |")
    print("| --- |" + " ---: |" * (5 + len(mbs)))
    for k in singles:
        whole = singles[k][1]
        t1[k] = tokens / median_of(whole, "tokens_per_s") * 1e3
        opt = phase(whole, "optimizer")
        for m in mbs:
            tmb[(k, m)] = m * (phase(singles[k][m], "forward") + phase(singles[k][m], "backward")) + opt
        print(f"| {IMPLS[k]} | {tp.fmt(tokens / t1[k] * 1e3)} | {tp.fmt(t1[k])} | {tp.fmt(phase(whole, 'forward'))} | "
              f"{tp.fmt(phase(whole, 'backward'))} | {tp.fmt(opt)} | "
              + " | ".join(tp.fmt(tmb[(k, m)]) for m in mbs) + " |")
    if "libacc" in singles and "pytorch" in singles:
        print(f"| libacc / torch (time) | | {t1['libacc'] / t1['pytorch']:.2f} | | | | "
              + " | ".join(f"{tmb[('libacc', m)] / tmb[('pytorch', m)]:.2f}" for m in mbs) + " |")
    # The candidate build changes the pipelined step only: its bubble is taken against libacc's single process.
    ref = {k: "libacc" if k == "libacc-candidate" else k for k in impls}
    print("\npp=2 (2 processes): tokens/s of the job. Bubble: 1 - T_ideal / T_step with T_ideal = T_1 / 2 (each "
          "implementation against its own single process), beside 1 - (T_mb / 2) / T_step (the micro-batches' own "
          "cost taken out) and the schedule's theory (bubble_fraction: (p-1)/(m+p-1), interleaved (p-1)/(vm+p-1)):\n")
    head = "| schedule | micro-batches |"
    for k in impls:
        head += f" {SHORT[k]} tokens/s | {SHORT[k]} step (ms) |"
    head += "".join(f" {SHORT[k]} / torch (range over rounds) |" for k in ours)
    head += "".join(f" bubble, {SHORT[k]} (T_1; T_mb) |" for k in impls) + " bubble, theory |"
    print(head)
    print("| --- | ---: |" + " ---: |" * (head.count("|") - 3))
    ratios = {}
    for s, m in cases:
        med = {k: median_of(results[(s, m)][k], "tokens_per_s") for k in impls}
        step = {k: tokens / med[k] * 1e3 for k in impls}
        row = f"| {s} | {m} |"
        for k in impls:
            row += f" {tp.fmt(med[k])} | {tp.fmt(step[k])} |"
        for k in ours:
            per_round = [x["tokens_per_s"] / y["tokens_per_s"]
                         for x, y in zip(results[(s, m)][k], results[(s, m)]["pytorch"])]
            ratios[(k, s, m)] = med[k] / med["pytorch"]
            row += f" **{ratios[(k, s, m)]:.2f}** ({min(per_round):.2f}-{max(per_round):.2f}) |"
        row += "".join(f" {1 - t1[ref[k]] / P / step[k]:.3f}; {1 - tmb[(ref[k], m)] / P / step[k]:.3f} |"
                       for k in impls)
        t = theory(a, s, m)
        print(row + (f" {t:.3f} |" if t is not None else " - |"))
    everything = ([r for k in singles for runs in singles[k].values() for r in runs]
                  + [r for case in cases for k in impls for r in results[case][k]])
    quiet = [r["quiet"] for r in everything]
    print(f"\nBefore each run the other processes used {min(q['busy_cores'] for q in quiet):.2f}-"
          f"{max(q['busy_cores'] for q in quiet):.2f} cores (load average {min(q['load1'] for q in quiet):.2f}-"
          f"{max(q['load1'] for q in quiet):.2f}).")
    print("\nPhases, rank 0's ms per step (median): libacc's forward is the whole pipelined step "
          "(acc_model_forward with targets), its backward acc_backward (the step's synchronisation); torch's forward "
          "is schedule.step, its backward the loss broadcast from the last stage:\n")
    print("| schedule | micro-batches | implementation | forward | backward | optimizer |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for s, m in cases:
        for k in impls:
            runs = results[(s, m)][k]
            print(f"| {s} | {m} | {IMPLS[k]} | {tp.fmt(phase(runs, 'forward'))} | {tp.fmt(phase(runs, 'backward'))} | "
                  f"{tp.fmt(phase(runs, 'optimizer'))} |")
    # Every run starts from the same weights on the same batch: the loss curves are those of one process.
    first = next(iter(singles))
    reference = singles[first][1][0]["losses"]
    rel = max(loss_difference([r for case in cases for r in results[case][k]] + singles.get(k, {1: []})[1], reference)
              for k in impls)
    print(f"\nLoss curves ({len(reference)} steps, every rank of every run) against {IMPLS[first]}'s single "
          f"process ({reference[0]:.6f} -> {reference[-1]:.6f}): largest relative difference {rel:.2g}.")
    return ratios, rel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--schedules", default="GPipe,1F1B")
    ap.add_argument("--microbatches", default="4,8,16")
    ap.add_argument("--impls", default="libacc,pytorch",
                    help="subset of " + ",".join(IMPLS) + " (--candidate-build adds libacc-candidate)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (OMP_NUM_THREADS)")
    ap.add_argument("--steps", type=int, help="timed steps per run (default: the size's)")
    ap.add_argument("--warmup", type=int, help="untimed steps before them (default: the size's)")
    ap.add_argument("--split", type=int, help="the block stage 1 begins with (default: libacc's balanced cut)")
    ap.add_argument("--stages-per-rank", type=int, default=2,
                    help=f"stages per rank of {' and '.join(MULTI)} (split as libacc balances them)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of both sides")
    ap.add_argument("--torch-adamw", choices=("fused", "foreach"), default="fused",
                    help="torch's AdamW: fused (the kernel libacc's AdamW uses; default) or foreach (torch's default)")
    ap.add_argument("--max-busy", type=float, default=0.2,
                    help="before every timed run, wait (up to 60 s) until the machine used at most this many cores "
                    "over a second (run.py's check; negative: do not wait)")
    ap.add_argument("--lock", help="hold this file's flock during each case's runs of a round (the shared build lock)")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-pipeline"),
                    help="scratch directory: the model is saved there, removed at the end")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--candidate-build", metavar="DIR",
                    help="another build of libacc (DIR/launcher/acc, DIR/bench/tp_step: a change to the pipeline) run "
                    "as the implementation libacc-candidate beside the others, pipelined runs only (its bubble against "
                    "libacc's single process)")
    ap.add_argument("--json", help="write every run's result there")
    ap.add_argument("--check", type=float, metavar="TOL",
                    help="not a timing: exit 1 when a loss curve differs from the single process's by more than TOL "
                    "(relative), 77 (skipped) without .venv-bench")
    a = ap.parse_args()
    if not os.path.exists(PY):
        sys.exit(77 if a.check is not None else f"{PY} is missing: run bash bench/setup.sh first")
    a.impls = a.impls.split(",") + (["libacc-candidate"] if a.candidate_build and "libacc-candidate" not in a.impls
                                    else [])
    for x in a.impls:
        if x not in IMPLS:
            sys.exit(f"unknown '{x}' (known: {', '.join(IMPLS)})")
    if "libacc-candidate" in a.impls and not (a.candidate_build and "libacc" in a.impls):
        sys.exit("libacc-candidate runs --candidate-build DIR beside libacc: give both")
    schedules, mbs = a.schedules.split(","), [int(m) for m in a.microbatches.split(",")]
    for s in schedules:
        if s not in ("GPipe", "1F1B") + MULTI:
            sys.exit(f"unknown schedule '{s}' (GPipe, 1F1B, {', '.join(MULTI)})")
    size = dict(SIZES[a.size])
    for k in ("steps", "warmup"):
        if getattr(a, k) is not None:
            size[k] = getattr(a, k)
    for m in mbs:
        if size["batch"] % m:
            sys.exit(f"{m} micro-batches do not divide the batch of {size['batch']}")
    config = dict(size["config"], **tp.COMMON_CONFIG)
    size["config"] = config
    a.layers = config["num_hidden_layers"]
    if a.split is None:
        a.split = balanced_splits(a.layers, P)[0]
    a.builds = {k: (os.path.join(d, "launcher", "acc"), os.path.join(d, "bench", "tp_step"))
                for k, d in (("libacc", os.path.abspath(a.build)),
                             ("libacc-candidate", os.path.abspath(a.candidate_build or a.build)))}
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    model_dir = os.path.join(a.dir, "model")
    cases = [(s, m) for s in schedules for m in mbs]
    results = {case: {k: [] for k in a.impls} for case in cases}
    # The single process's runs: the whole batch (key 1), and batch / m sequences a step for each m.
    singles = {k: {m: [] for m in [1, *mbs]} for k in a.impls if k != "libacc-candidate"}
    try:
        parameters = tp.save_model(a, model_dir, config)
        c = config
        print(f"LlamaForCausalLM `{a.size}`: {parameters / 1e6:.2f} M parameters (hidden {c['hidden_size']}, "
              f"intermediate {c['intermediate_size']}, {c['num_hidden_layers']} layers, {c['num_attention_heads']} "
              f"heads ({c['num_key_value_heads']} key/value), vocab {c['vocab_size']}, untied head), float32; cut "
              f"before block {a.split}; AdamW lr {a.lr:g}, weight_decay 0.01 (torch: {a.torch_adamw})", flush=True)
        for r in range(a.rounds):
            turn = lambda xs: xs[r % len(xs):] + xs[:r % len(xs)]
            print(f"round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
            # Each case's runs (both sides) under one hold of the lock: the same conditions, and fewer waits for it.
            with holding(a.lock):
                for k in turn(list(singles)):
                    for m in [1, *mbs]:
                        singles[k][m].append(timed(a, k, None, None, size, model_dir,
                                                   f"single, batch {size['batch'] // m:<3d}", size["batch"] // m,
                                                   size["steps"] * m))
            for s, m in (cases if r % 2 == 0 else cases[::-1]):
                with holding(a.lock):
                    for k in turn(a.impls):
                        results[(s, m)][k].append(timed(a, k, s, m, size, model_dir, f"{s:5s} m={m:<8d}"))
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"size": a.size, "config": config, "split": a.split, "singles": singles,
                               "results": {f"{s} {m}": v for (s, m), v in results.items()}},
                              f, indent=1)
        for case in cases:
            for k in a.impls:
                got = results[case][k][0]["rank_local_parameters"]
                if sum(got) != parameters:
                    sys.exit(f"{IMPLS[k]} {case}: the stages hold {got} parameters, the model {parameters}")
            if len({tuple(results[case][k][0]["rank_local_parameters"]) for k in a.impls}) != 1:
                sys.exit(f"{case}: the implementations cut the model differently: "
                         + str({k: results[case][k][0]["rank_local_parameters"] for k in a.impls}))
        _, rel = report(a, size, cases, results, singles, mbs)
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)
    if a.check is not None and not rel <= a.check:
        sys.exit(f"the loss curves differ by {rel:.3g} relative (more than {a.check:g})")


if __name__ == "__main__":
    main()
