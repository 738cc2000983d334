#!/usr/bin/env python3
"""LoRA fine-tuning benchmark: the same LlamaForCausalLM (bench/hf.py's, random weights saved once by transformers)
with the same initial LoRA adapter (r 16, every linear layer but the head, saved once by peft), trained on 2 CPU
processes through libacc (bench/lora_step.c, the C ABI, started by `acc launch`) and through peft + Accelerate
(bench/lora_step.py, started by `accelerate launch`), under DDP and under FSDP2 (the same Accelerate config file
for both launchers), alternated over rounds (their order turns every round). Measures tokens/s over the timed
steps, every rank's peak resident memory (VmHWM) and each rank's loss at every step (the curves must agree), and
libacc's full fine-tuning (no adapter) beside its LoRA for the memory per rank. Prints markdown tables of medians
and libacc's ratios.

  bash bench/setup.sh && python3 bench/lora.py [--size default|small] [--rounds 3] [--strategies ddp,fsdp]
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
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")
ACCELERATE = os.path.join(ROOT, ".venv-bench", "bin", "accelerate")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import binary, run, run_ranks  # noqa: E402

# Each size once: the LlamaConfig (hf.py's, float32, untied head), the tokens per process and step, the steps.
SIZES = {
    "small": dict(config=dict(vocab_size=8000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2),
                  batch=2, seq=64, warmup=2, steps=10, full_steps=2),
    "default": dict(config=dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                num_attention_heads=12, num_key_value_heads=4),
                    batch=2, seq=128, warmup=1, steps=5, full_steps=1),
}
COMMON_CONFIG = dict(max_position_embeddings=2048, tie_word_embeddings=False, dtype="float32")
LORA_R, LORA_ALPHA = 16, 32
IMPLS = {"libacc": "libacc", "peft": "peft + Accelerate", "libacc-full": "libacc, full fine-tuning"}
# FSDP2, FULL_SHARD (parameters resharded after forward), a unit per decoder layer: the same file for both launchers.
FSDP_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_machines: 1
num_processes: {procs}
mixed_precision: 'no'
use_cpu: true
fsdp_config:
  fsdp_version: 2
  fsdp_reshard_after_forward: true
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_cpu_ram_efficient_loading: false
"""
STRATEGIES = {"ddp": "DDP", "fsdp": "FSDP2"}


def launch(impl, strategy, procs, threads, fsdp_config, step_args, env, scratch, acc, lora_step):
    """One run on `procs` processes; returns every rank's result (lora_step's BENCH_OUT/rank<R>.json), by rank."""
    out = tempfile.mkdtemp(prefix="run-", dir=scratch)
    common = ["--num_processes", str(procs), "--num_cpu_threads_per_process", str(threads), "--main_process_port", "0"]
    if impl == "peft":
        # accelerate launch --cpu runs one process (several need mpirun); torchrun through --multi_gpu, with
        # Accelerator(cpu=True) in the script, is Accelerate's MULTI_CPU over Gloo.
        how = ["--config_file", fsdp_config] if strategy == "fsdp" else [
            "--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        cmd = [ACCELERATE, "launch", *how, *common, os.path.join(ROOT, "bench", "lora_step.py"), "lora", *step_args]
    else:
        how = ["--config_file", fsdp_config] if strategy == "fsdp" else ["--cpu"]
        mode = "full" if impl == "libacc-full" else "lora"
        cmd = [acc, "launch", *how, *common, lora_step, mode, *step_args]
    ranks = run_ranks(cmd, dict(env, BENCH_OUT=out), out, procs, timeout=3600)
    # Accelerate's side says what each rank holds after prepare: all of it (DDP) or its shards (FSDP).
    if impl == "peft" and (ranks[0]["local_parameters"] < ranks[0]["parameters"]) != (strategy == "fsdp"):
        sys.exit(f"Accelerate under {strategy} holds {ranks[0]['local_parameters']} of {ranks[0]['parameters']} "
                 "parameters per rank")
    return ranks


MEMORY = ("rss_before_load_mb", "rss_loaded_mb", "rss_prepared_mb", "peak_rss_prepared_mb", "peak_rss_first_step_mb",
          "peak_rss_mb")


def summary(ranks):
    """A run's figures: rank 0's tokens/s (all ranks' tokens) and phases; memory: the largest of the ranks."""
    return {"tokens_per_s": ranks[0]["tokens_per_s"], "step_ms": ranks[0]["step_ms"],
            "peak_above_mb": max(r["peak_rss_mb"] - r["rss_before_load_mb"] for r in ranks),
            **{m: max(r[m] for r in ranks) for m in MEMORY},
            **{p: ranks[0]["phase_ms"][p] for p in ("forward", "backward", "optimizer")}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--strategies", default="ddp,fsdp", help="subset of ddp,fsdp")
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (OMP_NUM_THREADS)")
    ap.add_argument("--steps", type=int, help="timed steps per run (default: the size's)")
    ap.add_argument("--warmup", type=int, help="untimed steps before them (default: the size's)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of both sides")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-lora"),
                    help="scratch directory: the model and the adapter are saved there, removed at the end")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", help="write every run's result there")
    ap.add_argument("--check", type=float, metavar="TOL",
                    help="a test (meson's lora-bench-losses): exit 1 when libacc's and peft's losses differ by more "
                    "than TOL, 77 (skipped) without .venv-bench")
    args = ap.parse_args()
    if not os.path.exists(PY):
        sys.exit(77 if args.check is not None else f"{PY} is missing: run bash bench/setup.sh first")
    if args.check is not None and not {"libacc", "peft"} <= set(args.impls.split(",")):
        sys.exit("--check compares libacc with peft: --impls must hold both")
    size = dict(SIZES[args.size])
    for k in ("steps", "warmup"):
        if getattr(args, k) is not None:
            size[k] = getattr(args, k)
    strategies = [s for s in STRATEGIES if s in args.strategies.split(",")]
    impls = [i for i in IMPLS if i in args.impls.split(",")]
    for given, known in ((args.strategies, STRATEGIES), (args.impls, IMPLS)):
        for x in given.split(","):
            if x not in known:
                sys.exit(f"unknown '{x}' (known: {', '.join(known)})")
    config = dict(size["config"], **COMMON_CONFIG)

    build = os.path.abspath(args.build)
    acc, lora_step = os.path.join(build, "launcher", "acc"), binary(build, "lora_step")
    env = dict(os.environ, ACC_CONFIG_FILE="none", TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    model_dir, adapter_dir = os.path.join(args.dir, "model"), os.path.join(args.dir, "adapter")
    fsdp_config = os.path.join(args.dir, "fsdp.yaml")
    with open(fsdp_config, "w") as f:
        f.write(FSDP_CONFIG.format(procs=args.processes))
    results = {s: {k: [] for k in impls} for s in strategies}
    try:
        saved = run([PY, os.path.join(ROOT, "bench", "hf_step.py"), "save", model_dir, json.dumps(config)], env)
        adapter = run([PY, os.path.join(ROOT, "bench", "lora_step.py"), "save-adapter", model_dir, adapter_dir,
                       str(LORA_R), str(LORA_ALPHA)], env)
        print(f"saved {saved['parameters'] / 1e6:.2f} M parameters to {model_dir}, the initial adapter "
              f"({adapter['trainable'] / 1e6:.2f} M trainable) to {adapter_dir}", file=sys.stderr)
        tail = [str(v) for v in (config["vocab_size"], size["batch"], size["seq"])]
        step_args = {
            k: [model_dir, adapter_dir, *tail, *(["1", str(size["full_steps"])] if k == "libacc-full"
                                                 else [str(size["warmup"]), str(size["steps"])]), str(args.lr)]
            for k in impls}
        for r in range(args.rounds):
            for s in strategies:
                order = impls[r % len(impls):] + impls[:r % len(impls)]
                for k in order:
                    if k == "libacc-full" and r > 0:
                        continue  # its memory is the same in every round: measured once
                    t = time.monotonic()
                    ranks = launch(k, s, args.processes, args.threads, fsdp_config, step_args[k], env, args.dir,
                                   acc, lora_step)
                    results[s][k].append(ranks)
                    m = summary(ranks)
                    print(f"round {r + 1} {s} {k:11s} {m['tokens_per_s']:8.1f} tokens/s, {m['step_ms']:8.1f} ms/step "
                          f"(forward {m['forward']:.0f}, backward {m['backward']:.0f}, optimizer {m['optimizer']:.1f})"
                          f", peak RSS per rank {', '.join(str(x['peak_rss_mb']) for x in ranks)} MB; "
                          f"{time.monotonic() - t:.0f} s",
                          file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "config": config, "results": results}, f, indent=1)
    report(args, size, config, saved, adapter, strategies, impls, results)
    if args.check is not None:
        for s in strategies:
            diff = loss_difference(results[s])
            if not diff <= args.check:
                sys.exit(f"{STRATEGIES[s]}: libacc's and peft's losses differ by {diff:.3g} (more than {args.check:g})")


def loss_difference(runs):
    """The largest difference between libacc's and peft's losses over every rank, step and round of a strategy."""
    ours = [x for run_ in runs["libacc"] for x in run_]
    theirs = [x for run_ in runs["peft"] for x in run_]
    if len(ours) != len(theirs) or any(len(x["losses"]) != len(y["losses"]) for x, y in zip(ours, theirs)):
        sys.exit("the loss curves differ in length")
    return max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x["losses"], y["losses"]))


def report(args, size, config, saved, adapter, strategies, impls, results):
    fmt = lambda v: f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"
    print(f"### LoRA fine-tuning, LlamaForCausalLM `{args.size}`: {saved['parameters'] / 1e6:.1f} M parameters, "
          f"float32 on CPU\n")
    print(f"hidden {config['hidden_size']}, intermediate {config['intermediate_size']}, {config['num_hidden_layers']} "
          f"layers, {config['num_attention_heads']} heads ({config['num_key_value_heads']} key/value), vocab "
          f"{config['vocab_size']}, untied head. LoRA r {LORA_R}, lora_alpha {LORA_ALPHA}, all-linear (the 7 "
          f"projections of every layer), no dropout: {adapter['trainable'] / 1e6:.2f} M trainable; AdamW lr "
          f"{args.lr:g}, weight_decay 0.01. {args.processes} processes x {args.threads} thread, {size['batch']} x "
          f"{size['seq']} tokens per process and step, {size['steps']} timed steps after {size['warmup']} warm-up; "
          f"median of {args.rounds} alternated rounds. Peak RSS: the largest rank's VmHWM (whole process).\n")
    both = "libacc" in impls and "peft" in impls
    rows = [("tokens/s (all ranks)", "tokens_per_s", "≥ 1.2"), ("peak RSS per rank (MB)", "peak_rss_mb", "≤ 0.7"),
            ("peak RSS per rank above the process before the load (MB)", "peak_above_mb", ""),
            ("step (ms)", "step_ms", ""), ("forward (ms)", "forward", ""), ("backward (ms)", "backward", ""),
            ("optimizer step + zero_grad (ms)", "optimizer", "")]
    shown = [k for k in ("libacc", "peft") if k in impls]
    print("| strategy | measurement | " + " | ".join(IMPLS[k] for k in shown)
          + (" | libacc / peft + Accelerate (range) | target |" if both else " |"))
    print("| --- | --- | " + " | ".join("---:" for _ in shown) + (" | ---: | :---: |" if both else " |"))
    for s in strategies:
        sums = {k: [summary(x) for x in results[s][k]] for k in impls}
        med = {k: {key: statistics.median(m[key] for m in sums[k]) for key in sums[k][0]} for k in impls}
        for label, key, target in rows:
            cells = [fmt(med[k][key]) for k in shown]
            line = f"| {STRATEGIES[s]} | {label} | " + " | ".join(cells)
            if both:
                per_round = [a[key] / b[key] for a, b in zip(sums["libacc"], sums["peft"])]
                line += (f" | {med['libacc'][key] / med['peft'][key]:.2f} ({min(per_round):.2f}-{max(per_round):.2f})"
                         f" | {target} |")
            print(line + (" |" if not both else ""))
    print()

    if "libacc-full" in impls and "libacc" in impls:
        print("libacc's memory per rank, full fine-tuning (every parameter trained, AdamW over all) against LoRA "
              f"(the same run as above); full: {size['full_steps']} timed step after 1 warm-up.\n")
        print("| strategy | full: peak RSS per rank (MB) | LoRA: peak RSS per rank (MB) | LoRA / full | "
              "full: above the process before the load (MB) | LoRA: above (MB) | full: tokens/s | LoRA: tokens/s |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for s in strategies:
            m = {k: {key: statistics.median(summary(x)[key] for x in results[s][k])
                     for key in ("peak_rss_mb", "peak_above_mb", "tokens_per_s")} for k in ("libacc-full", "libacc")}
            f, lo = m["libacc-full"], m["libacc"]
            print(f"| {STRATEGIES[s]} | {fmt(f['peak_rss_mb'])} | {fmt(lo['peak_rss_mb'])} | "
                  f"{lo['peak_rss_mb'] / f['peak_rss_mb']:.2f} | {fmt(f['peak_above_mb'])} | {fmt(lo['peak_above_mb'])} | "
                  f"{fmt(f['tokens_per_s'])} | {fmt(lo['tokens_per_s'])} |")
        print()

    print("Where the memory goes: resident memory per rank (MB, the largest rank, median over the rounds) before the "
          "model is loaded (the runtime; Python: the interpreter, torch, transformers, peft, accelerate), after the "
          "load (libacc and peft: with the adapter), after prepare, and the peak (VmHWM) by the end of prepare, "
          "after the first step and at the end.\n")
    print("| strategy | implementation | before the load | loaded | prepared | peak by prepare | peak after step 1 "
          "| peak |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in strategies:
        for k in impls:
            m = [statistics.median(summary(x)[key] for x in results[s][k]) for key in MEMORY]
            print(f"| {STRATEGIES[s]} | {IMPLS[k]} | " + " | ".join(f"{v:.0f}" for v in m) + " |")
    print()

    notes = []
    for s in strategies:
        if both:
            # Every rank's loss at every step, every round: the same adapter, tokens and optimizer.
            diff = loss_difference(results[s])
            l0, p0 = results[s]["libacc"][0][0]["losses"], results[s]["peft"][0][0]["losses"]
            notes.append(f"{STRATEGIES[s]} loss curves from the same initial adapter ({len(l0)} steps, each rank's "
                         f"loss on its own tokens, every round): rank 0 libacc {l0[0]:.6f} -> {l0[-1]:.6f}, peft + "
                         f"Accelerate {p0[0]:.6f} -> {p0[-1]:.6f}; largest difference over ranks, steps and rounds "
                         f"{diff:.3g}.")
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
