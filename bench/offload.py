#!/usr/bin/env python3
"""Disk offload benchmark: big-model inference on CPU with the layers that do not fit a memory budget left on
the disk, libacc (bench/offload_step.c, the C ABI) against Accelerate (bench/offload_step.py:
init_empty_weights + load_checkpoint_and_dispatch), on the same LlamaForCausalLM (random weights, float32,
saved once by transformers' save_pretrained into a scratch directory) and the same device map. Four
configurations, one process each, alternated over rounds (their order turns every round):

  libacc in memory        acc_model_from_pretrained(DIR) with no device map
  libacc CPU + disk       acc_model_from_pretrained(DIR, {"device_map": "sequential", "max_memory": {"cpu": BUDGET}})
  Accelerate in memory    load_checkpoint_and_dispatch(model, DIR, device_map={"": "cpu"})
  Accelerate CPU + disk   load_checkpoint_and_dispatch(model, DIR, device_map=<libacc's map>, offload_folder=TMP)

BUDGET is the safetensors' size times --budget-fraction. The map is libacc's acc_infer_auto_device_map, checked
equal to Accelerate's infer_auto_device_map with the same max_memory and no_split_module_classes (every key,
model.rotary_emb, a module without weights, included). Measures the
load, greedy generation (batch 1, no stop token) in new tokens/s, and the peak resident memory over the load
and the generation above the process's resident memory just before the load (VmHWM after resetting it by
writing "5" to /proc/self/clear_refs, minus VmRSS then); checks that the generated tokens are the same in every
configuration and round. Prints a markdown table of medians and libacc / Accelerate ratios.

  bash bench/setup.sh && python3 bench/offload.py [--size default|small] [--rounds 3] [--budget-fraction 0.333]
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
from common import binary, run  # noqa: E402

# Each size once: the LlamaConfig (float32, untied head).
SIZES = {
    "small": dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=12,
                  num_attention_heads=8, num_key_value_heads=8),  # ~180 MB, tests/c/test_bigmodel.c's
    "default": dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                    num_attention_heads=16, num_key_value_heads=16),  # ~1.1 GB
}
COMMON_CONFIG = dict(max_position_embeddings=2048, tie_word_embeddings=False, dtype="float32")
CONFIGS = ("libacc-memory", "accelerate-memory", "libacc-disk", "accelerate-disk")
NAMES = {"libacc-memory": "libacc in memory", "accelerate-memory": "Accelerate in memory",
         "libacc-disk": "libacc CPU + disk", "accelerate-disk": "Accelerate CPU + disk"}


def placement(device_map):
    """'model.embed_tokens, model.layers.0-2 on cpu; model.layers.3-11, model.norm, lm_head on disk'."""
    groups = {}
    for name, device in device_map.items():
        groups.setdefault(str(device), []).append(name)

    def short(names):
        out, run_ = [], []
        for n in names + [None]:
            if n is not None and n.startswith("model.layers."):
                run_.append(int(n.rsplit(".", 1)[1]))
                continue
            if run_:
                out.append(f"model.layers.{run_[0]}" + (f"-{run_[-1]}" if len(run_) > 1 else ""))
                run_ = []
            if n is not None:
                out.append(n)
        return ", ".join(out)

    return "; ".join(f"{short(names)} on {device}" for device, names in groups.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget-fraction", type=float, default=1 / 3,
                    help="max_memory cpu = this fraction of the safetensors' bytes (default 1/3)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of every side")
    ap.add_argument("--prompt", type=int, default=16, help="generation prompt tokens")
    ap.add_argument("--new-tokens", type=int, default=32, help="generated tokens per call")
    ap.add_argument("--warmup", type=int, default=1, help="untimed generate calls after the load")
    ap.add_argument("--gen-reps", type=int, default=2, help="timed generate calls")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="subset of " + ",".join(CONFIGS))
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-offload"),
                    help="scratch directory: the model is saved under DIR/model, removed at the end")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", help="write every run's result there")
    args = ap.parse_args()
    configs = [c for c in CONFIGS if c in args.configs.split(",")]
    config = dict(SIZES[args.size], **COMMON_CONFIG)

    exe = binary(args.build, "offload_step")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), ACC_CONFIG_FILE="none", TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_VERBOSITY="error")
    model_dir = os.path.join(args.dir, "model")
    map_file = os.path.join(args.dir, "device_map.json")
    shutil.rmtree(model_dir, ignore_errors=True)
    os.makedirs(args.dir, exist_ok=True)
    results = {k: [] for k in configs}
    try:
        saved = run([PY, os.path.join(ROOT, "bench", "hf_step.py"), "save", model_dir, json.dumps(config)], env)
        weights = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir)
                      if f.endswith(".safetensors"))
        budget = int(weights * args.budget_fraction)
        print(f"saved {saved['parameters'] / 1e6:.2f} M parameters ({weights / 1e6:.0f} MB of safetensors) to "
              f"{model_dir}; budget {budget / 1e6:.0f} MB", file=sys.stderr)

        # The map: libacc's plan, which must equal Accelerate's; the Accelerate disk runs load onto it.
        gen_args = [str(v) for v in (config["vocab_size"], args.prompt, args.new_tokens, args.warmup, args.gen_reps)]
        device_map = run([exe, model_dir, "plan", str(budget), *gen_args], env)["planned_map"]
        accelerate_plan = run([PY, os.path.join(ROOT, "bench", "offload_step.py"), "plan", model_dir, str(budget)], env)
        accelerate_map = accelerate_plan["planned_map"]
        # The same map, key for key and in order (weightless modules such as model.rotary_emb included).
        if accelerate_map != device_map or list(accelerate_map) != list(device_map):
            sys.exit(f"device maps differ:\nlibacc     {json.dumps(device_map)}\nAccelerate {json.dumps(accelerate_map)}")
        with open(map_file, "w") as f:
            json.dump(device_map, f)
        print(f"device map (libacc's = Accelerate's): "
              f"{placement(device_map)}", file=sys.stderr)

        commands = {
            "libacc-memory": [exe, model_dir, "memory", str(budget), *gen_args],
            "libacc-disk": [exe, model_dir, "disk", str(budget), *gen_args],
            "accelerate-memory": [PY, os.path.join(ROOT, "bench", "offload_step.py"), "memory", model_dir, str(budget),
                                  *gen_args],
            "accelerate-disk": [PY, os.path.join(ROOT, "bench", "offload_step.py"), "disk", model_dir, str(budget),
                                *gen_args, map_file],
        }
        for r in range(args.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for c in order:
                results[c].append(run(commands[c], env))
                shown = {k: v for k, v in results[c][-1].items() if k not in ("generated", "device_map", "planned_map")}
                print(f"round {r + 1} {c}: {json.dumps(shown)}", file=sys.stderr)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
        if os.path.exists(map_file):
            os.remove(map_file)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"size": args.size, "config": config, "budget": budget, "device_map": device_map,
                       "threads": args.threads, "results": results}, f, indent=1)

    counts = {k: results[k][0]["parameters"] for k in configs}
    if len(set(counts.values())) != 1:
        sys.exit(f"parameter counts differ: {counts}")
    if "libacc-disk" in configs and any(x["planned_map"] != device_map for x in results["libacc-disk"]):
        sys.exit("libacc's disk runs planned another map than the one given to Accelerate")
    # Greedy tokens: the same weights, the same prompt: the same tokens everywhere.
    outputs = {(k, r): tuple(x["generated"]) for k in configs for r, x in enumerate(results[k])}
    if {len(v) for v in outputs.values()} != {args.new_tokens}:
        sys.exit(f"generated lengths differ from {args.new_tokens}: {sorted({len(v) for v in outputs.values()})}")
    reference = outputs[(configs[0], 0)]
    differing = sorted({k for (k, _), v in outputs.items() if v != reference})
    agreement = ("identical in every configuration and round" if not differing else
                 "DIFFERENT from " + NAMES[configs[0]] + "'s in: " + ", ".join(NAMES[k] for k in differing))

    med = lambda k, key: statistics.median(x[key] for x in results[k]) if k in results else None
    fmt = lambda v: "—" if v is None else f"{v:.3f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"

    def ratio(key, mode):
        a, b = f"libacc-{mode}", f"accelerate-{mode}"
        if a not in results or b not in results:
            return "—"
        per_round = [x[key] / y[key] for x, y in zip(results[a], results[b])]
        return f"{med(a, key) / med(b, key):.2f} ({min(per_round):.2f}-{max(per_round):.2f})"

    rows = [  # (label, key, lower is better)
        ("load (s)", "load_s", True),
        ("greedy generation, batch 1 (new tokens/s)", "generate_tokens_per_s", False),
        ("first generate call after the load (s)", "first_generate_s", True),
        ("peak RSS above the process before the load, load only (MB)", "load_peak_rss_mb", True),
        ("peak RSS above the process before the load, load + generation (MB)", "peak_rss_mb", True),
    ]
    on_disk = sum(1 for v in device_map.values() if v == "disk")
    print(f"### LlamaForCausalLM `{args.size}`: {counts[configs[0]] / 1e6:.1f} M parameters, float32, CPU + disk\n")
    print(f"hidden {config['hidden_size']}, intermediate {config['intermediate_size']}, {config['num_hidden_layers']} "
          f"layers, {config['num_attention_heads']} heads, vocab {config['vocab_size']}, untied head: "
          f"{weights / 1e6:.0f} MB of safetensors; budget `max_memory={{\"cpu\": {budget / 1e6:.0f} MB}}` "
          f"({args.budget_fraction:.3g} of the weights), `device_map=\"sequential\"`: {placement(device_map)} "
          f"({on_disk} of {len(device_map)} modules on the disk). One process per configuration, {args.threads} "
          f"threads, median of {args.rounds} alternated rounds; generation: prompt {args.prompt}, {args.new_tokens} "
          f"new tokens, {args.warmup} untimed then {args.gen_reps} timed calls. Peak RSS: VmHWM reset through "
          f"/proc/self/clear_refs just before the load, minus VmRSS then.\n")
    print("Ratios are libacc / Accelerate with their range over the rounds: for times and memory **below 1 is "
          "libacc better**, for tokens/s **above 1**.\n")
    heads = [NAMES[c] for c in ("libacc-memory", "accelerate-memory")] + ["libacc / Accelerate"] + \
            [NAMES[c] for c in ("libacc-disk", "accelerate-disk")] + ["libacc / Accelerate"]
    print("| measurement | " + " | ".join(heads) + " |")
    print("| --- | " + " | ".join("---:" for _ in heads) + " |")
    for label, key, _ in rows:
        cells = [fmt(med(c, key)) for c in ("libacc-memory", "accelerate-memory")] + [ratio(key, "memory")] + \
                [fmt(med(c, key)) for c in ("libacc-disk", "accelerate-disk")] + [ratio(key, "disk")]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    notes = [f"Greedy tokens ({args.new_tokens} new): {agreement}.",
             "Device map: libacc's acc_infer_auto_device_map, given to Accelerate's load_checkpoint_and_dispatch; "
             "Accelerate's own infer_auto_device_map gives the same map (model.rotary_emb included)."]
    if "accelerate-disk" in results:
        notes.append(f"Accelerate's offload folder (the disk layers rewritten as .dat files during the load): "
                     f"{med('accelerate-disk', 'offload_folder_mb'):.0f} MB; libacc reads the disk layers from the "
                     f"mapped safetensors file itself.")
    rss = {c: med(c, "rss_after_mb") for c in configs}
    notes.append("Resident memory after the generation, above the process before the load (MB): "
                 + ", ".join(f"{NAMES[c]} {v:.0f}" for c, v in rss.items()) + "; the processes before the load: "
                 + ", ".join(f"{NAMES[c]} {med(c, 'base_rss_mb'):.0f}" for c in configs) + " MB.")
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
