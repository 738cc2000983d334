#!/usr/bin/env python3
"""Hugging Face model benchmark: the same LlamaForCausalLM (random weights, float32, saved once by transformers'
save_pretrained into a scratch directory) through libacc (bench/hf_step.c, the C ABI) and through transformers
(bench/hf_step.py: eager, torch.compile, and Accelerate's init_empty_weights + load_checkpoint_and_dispatch for
the load), on CPU, one process each with the same thread count, alternated over rounds (their order turns
every round). Measures the load (first call, warm and, as root, cold page cache), the eval forward and the
training step (AdamW) in tokens/s, and greedy generation in new tokens/s; checks that libacc's greedy tokens
equal transformers'. Prints a markdown table of medians and libacc's ratios.

  bash bench/setup.sh && python3 bench/hf.py [--size default|small] [--rounds 3] [--threads NPROC]
"""
import argparse
import json
import os
import shutil
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import binary, can_drop_caches, run  # noqa: E402

# Each size once: the LlamaConfig (float32, untied head), the forward / training batch, the timed steps.
SIZES = {
    "small": dict(config=dict(vocab_size=8000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2),
                  batch=2, seq=128, warmup=1, fwd_steps=5, train_steps=5, gen_reps=2),
    "default": dict(config=dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                num_attention_heads=12, num_key_value_heads=4),
                    batch=4, seq=256, warmup=1, fwd_steps=5, train_steps=3, gen_reps=2),
}
COMMON_CONFIG = dict(max_position_embeddings=2048, tie_word_embeddings=False, dtype="float32")
IMPLS = ("libacc", "transformers", "compile", "accelerate")
NAMES = {"libacc": "libacc", "transformers": "transformers eager", "compile": "torch.compile",
         "accelerate": "Accelerate"}








def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of every side")
    ap.add_argument("--fwd-steps", type=int, help="timed forward steps (default: the size's)")
    ap.add_argument("--train-steps", type=int, help="timed training steps (default: the size's)")
    ap.add_argument("--gen-reps", type=int, help="timed generate calls (default: the size's)")
    ap.add_argument("--warmup", type=int, help="untimed calls before each timed phase (default: the size's)")
    ap.add_argument("--prompt", type=int, default=32, help="generation prompt tokens")
    ap.add_argument("--new-tokens", type=int, default=64, help="generated tokens per call")
    ap.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate of both sides")
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-hf"),
                    help="scratch directory: the model is saved under DIR/model, removed at the end")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", help="write every run's result there")
    args = ap.parse_args()
    size = SIZES[args.size]
    for k in ("fwd_steps", "train_steps", "gen_reps", "warmup"):
        if getattr(args, k) is not None:
            size[k] = getattr(args, k)
    impls = [i for i in IMPLS if i in args.impls.split(",")]
    config = dict(size["config"], **COMMON_CONFIG)

    exe = binary(args.build, "hf_step")
    drop = can_drop_caches()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), ACC_CONFIG_FILE="none", TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_VERBOSITY="error")
    model_dir = os.path.join(args.dir, "model")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(args.dir, exist_ok=True)
    saved = run([PY, os.path.join(ROOT, "bench", "hf_step.py"), "save", model_dir, json.dumps(config)], env)
    weights = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    print(f"saved {saved['parameters'] / 1e6:.2f} M parameters ({weights / 1e6:.0f} MB of safetensors) to {model_dir}",
          file=sys.stderr)

    step_args = [str(v) for v in (config["vocab_size"], size["batch"], size["seq"], size["warmup"], size["fwd_steps"],
                                  size["train_steps"], args.prompt, args.new_tokens, size["gen_reps"], args.lr)]
    commands = {"libacc": [exe, model_dir, str(int(drop)), *step_args],
                "accelerate": [PY, os.path.join(ROOT, "bench", "hf_step.py"), "accelerate", model_dir, str(int(drop))]}
    for mode in ("transformers", "compile"):
        commands[mode] = [PY, os.path.join(ROOT, "bench", "hf_step.py"), mode, model_dir, str(int(drop)), *step_args]
    results = {k: [] for k in impls}
    try:
        for r in range(args.rounds):
            order = impls[r % len(impls):] + impls[:r % len(impls)]
            for impl in order:
                results[impl].append(run(commands[impl], env))
                shown = {k: v for k, v in results[impl][-1].items() if k != "generated"}
                print(f"round {r + 1} {impl}: {json.dumps(shown)}", file=sys.stderr)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "config": config, "threads": args.threads, "results": results}, f, indent=1)

    counts = {k: results[k][0]["parameters"] for k in impls}
    if len(set(counts.values())) != 1:
        sys.exit(f"parameter counts differ: {counts}")

    # Greedy tokens: libacc's against transformers' in every round (the same weights, the same prompt).
    agreement = None
    if "libacc" in impls and "transformers" in impls:
        lens = {len(x["generated"]) for k in ("libacc", "transformers") for x in results[k]}
        if lens != {args.new_tokens}:
            sys.exit(f"generated lengths differ from {args.new_tokens}: {lens}")
        diffs = [first_difference(a["generated"], b["generated"]) for a, b in zip(results["libacc"], results["transformers"])]
        agreement = ("identical in every round" if all(d is None for d in diffs) else
                     "DIFFERENT: first differing new token per round " + ", ".join(str(d) for d in diffs))

    med = lambda k, key: statistics.median(x[key] for x in results[k]) if k in results and key in results[k][0] else None
    rows = [  # (label, key, lower is better, implementations measured)
        ("load, first call in the process (s)", "load_first_s", True, ("libacc", "transformers", "accelerate")),
        ("load, warm page cache (s)", "load_warm_s", True, ("libacc", "transformers", "accelerate")),
    ]
    if drop:
        rows.append(("load, cold page cache (s)", "load_cold_s", True, ("libacc", "transformers", "accelerate")))
    rows += [
        ("forward, eval, no grad (tokens/s)", "forward_tokens_per_s", False, ("libacc", "transformers", "compile")),
        ("training step, AdamW (tokens/s)", "train_tokens_per_s", False, ("libacc", "transformers", "compile")),
        ("greedy generation, batch 1 (new tokens/s)", "generate_tokens_per_s", False, ("libacc", "transformers")),
    ]
    refs = [k for k in ("transformers", "compile", "accelerate") if k in impls]
    fmt = lambda v: "—" if v is None else f"{v:.3f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"

    def ratio(key, ref):
        if "libacc" not in impls or ref not in impls or key not in results[ref][0]:
            return "—"
        per_round = [a[key] / b[key] for a, b in zip(results["libacc"], results[ref])]
        return f"{med('libacc', key) / med(ref, key):.2f} ({min(per_round):.2f}-{max(per_round):.2f})"

    p = counts[impls[0]]
    print(f"### LlamaForCausalLM `{args.size}`: {p / 1e6:.1f} M parameters, float32 on CPU\n")
    print(f"hidden {config['hidden_size']}, intermediate {config['intermediate_size']}, {config['num_hidden_layers']} "
          f"layers, {config['num_attention_heads']} heads ({config['num_key_value_heads']} key/value), vocab "
          f"{config['vocab_size']}, untied head; {weights / 1e6:.0f} MB of safetensors. One process per "
          f"implementation, {args.threads} threads each, median of {args.rounds} alternated rounds. Forward and "
          f"training: {size['batch']} x {size['seq']} tokens, {size['fwd_steps']} / {size['train_steps']} timed "
          f"steps after {size['warmup']} warm-up; generation: prompt {args.prompt}, {args.new_tokens} new tokens, "
          f"{size['gen_reps']} timed calls. Cold loads follow `sync; echo 3 > /proc/sys/vm/drop_caches`"
          f"{'' if drop else ' (not possible here, not root: first-call and warm loads only)'}.\n")
    print("Ratios are libacc / reference with their range over the rounds: for load times **below 1 is libacc "
          "faster**, for tokens/s **above 1 is libacc faster**.\n")
    print("| measurement | libacc | " + " | ".join(NAMES[k] for k in refs) + " | "
          + " | ".join(f"libacc / {NAMES[k]}" for k in refs) + " | libacc better when |")
    print("| --- | ---: | " + " | ".join("---:" for _ in refs) + " | " + " | ".join("---:" for _ in refs) + " | :---: |")
    for label, key, lower, measured in rows:
        cells = [fmt(med(k, key)) if k in measured else "—" for k in ["libacc", *refs]]
        ratios = [ratio(key, k) if k in measured else "—" for k in refs]
        print(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + f" | {'< 1' if lower else '> 1'} |")
    print()
    notes = []
    if "compile" in impls:
        notes.append(f"torch.compile's compile time (its first call, excluded above): forward "
                     f"{med('compile', 'forward_compile_s'):.1f} s, training step {med('compile', 'train_compile_s'):.1f} s.")
    if "transformers" in impls:
        notes.append(f"transformers eager's forward with autograd on (eval), for reference: "
                     f"{med('transformers', 'forward_grad_tokens_per_s'):.0f} tokens/s.")
    losses = {k: results[k][0]["first_loss"] for k in ("libacc", "transformers", "compile") if k in impls}
    if losses:
        notes.append("First training loss (the same weights and tokens): "
                     + ", ".join(f"{NAMES[k]} {v:.6f}" for k, v in losses.items()) + ".")
    rss = {k: med(k, "peak_rss_mb") for k in ("libacc", "transformers", "compile") if k in impls}
    if rss:
        notes.append("Peak RSS of the whole run (MB): " + ", ".join(f"{NAMES[k]} {v:.0f}" for k, v in rss.items()) + ".")
    if agreement:
        notes.append(f"Greedy tokens, libacc against transformers ({args.new_tokens} new tokens): {agreement}.")
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
