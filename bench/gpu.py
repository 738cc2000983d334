#!/usr/bin/env python3
"""GPU benchmark: fine-tuning steps of the 124 M LlamaForCausalLM of bench/hf.py (random weights saved once by
transformers) on one CUDA device, in bf16 autocast over float32 weights, through libacc (bench/lora_step.c, the C
ABI) and through transformers + Accelerate (bench/lora_step.py with BENCH_DEVICE=cuda): full fine-tuning (AdamW over
every parameter; PyTorch's AdamW both as it comes, foreach, and fused) and LoRA (r 16, all linear layers, the same
initial adapter saved once by peft, through peft).
One process each, alternated over rounds (their order turns every round). Reports tokens/s, model FLOPs utilisation
against the device's dense bf16 peak, the peak device memory (nvidia-smi's, sampled: the whole process, CUDA context
and caching allocator included, the same measure for both), libacc's ratios, and checks that the loss curves agree.

Run where python3 has torch with CUDA, transformers, peft and accelerate (the GPU machines' image has them):
  python3 bench/gpu.py --build BUILD [--rounds 2] [--batch 8] [--seq 1024] [--steps 20]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import binary  # noqa: E402
from lora import COMMON_CONFIG, LORA_ALPHA, LORA_R, SIZES  # noqa: E402  (the model and adapter of lora.py)

IMPLS = {"libacc-full": "libacc, full", "accelerate-full": "transformers + Accelerate, full",
         "accelerate-full-fused": "transformers + Accelerate, full, fused AdamW",
         "libacc-lora": "libacc, LoRA", "peft-lora": "peft + Accelerate, LoRA"}
# Dense bf16 tensor-core peak (FLOP/s) by device name: NVIDIA's data sheets, SXM parts.
PEAK_BF16 = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}


def device_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True)
    except OSError:
        return "no GPU"
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "no GPU"


class MemorySampler:
    """The device's used memory (MiB, nvidia-smi) sampled every 50 ms while a run lasts; .peak above the idle."""

    def __init__(self):
        self.idle = self.read()
        self.peak = self.idle
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    @staticmethod
    def read():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True)
            return float(out.stdout.split()[0])
        except (OSError, IndexError, ValueError):  # no nvidia-smi, or no answer
            return float("nan")

    def loop(self):
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, self.read())

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def flops_per_token(config, seq, lora_parameters, lora):
    """Model FLOPs per trained token (PaLM's count): 6 per weight of every matrix product (the input embedding is a
    lookup) and 12 L d T for attention's scores and values; LoRA: the frozen weights' forward and input gradient
    (4 per weight) plus 6 per adapter weight."""
    d, L = config["hidden_size"], config["num_hidden_layers"]
    kv = d // config["num_attention_heads"] * config["num_key_value_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * config["intermediate_size"]
    matmul = L * per_layer + d * config["vocab_size"]  # the untied head
    attention = 12 * L * d * seq
    return (4 * matmul + 6 * lora_parameters if lora else 6 * matmul) + attention


def run_one(impl, args, model_dir, adapter_dir, config, env, lora_step):
    out = os.path.join(args.dir, "out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    mode = impl.split("-")[1]
    step_args = [mode, model_dir, adapter_dir, str(config["vocab_size"]), str(args.batch), str(args.seq),
                 str(args.warmup), str(args.steps), str(args.lr)]
    cmd = [lora_step, *step_args] if impl.startswith("libacc") else \
        [sys.executable, os.path.join(ROOT, "bench", "lora_step.py"), *step_args]
    env = dict(env, BENCH_OUT=out, BENCH_FUSED_ADAMW="1" if impl.endswith("fused") else "0")
    with MemorySampler() as mem:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    with open(os.path.join(out, "rank0.json")) as f:
        r = json.load(f)
    r["peak_device_mb"] = mem.peak - mem.idle
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "no"))
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    ap.add_argument("--dir", default="/tmp/acc-bench-gpu", help="scratch directory, removed at the end")
    ap.add_argument("--json", help="write every run's result there")
    args = ap.parse_args()
    impls = [i for i in IMPLS if i in args.impls.split(",")]
    config = dict(SIZES["default"]["config"], **COMMON_CONFIG)
    lora_step = binary(os.path.abspath(args.build), "lora_step")
    env = dict(os.environ, ACC_CONFIG_FILE="none", TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error",
               BENCH_DEVICE="cuda", ACCELERATE_MIXED_PRECISION=args.precision)
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    model_dir, adapter_dir = os.path.join(args.dir, "model"), os.path.join(args.dir, "adapter")
    py = [sys.executable, os.path.join(ROOT, "bench")]
    results = {k: [] for k in impls}
    try:
        saved = json.loads(subprocess.run([py[0], os.path.join(py[1], "hf_step.py"), "save", model_dir,
                                           json.dumps(config)], env=env, check=True, capture_output=True,
                                          text=True).stdout.strip().splitlines()[-1])
        adapter = json.loads(subprocess.run([py[0], os.path.join(py[1], "lora_step.py"), "save-adapter", model_dir,
                                             adapter_dir, str(LORA_R), str(LORA_ALPHA)], env=env, check=True,
                                            capture_output=True, text=True).stdout.strip().splitlines()[-1])
        for r in range(args.rounds):
            for k in impls[r % len(impls):] + impls[:r % len(impls)]:
                t = time.monotonic()
                res = run_one(k, args, model_dir, adapter_dir, config, env, lora_step)
                results[k].append(res)
                print(f"round {r + 1} {k:16s} {res['tokens_per_s']:10.0f} tokens/s, {res['step_ms']:7.2f} ms/step, "
                      f"peak device memory {res['peak_device_mb']:.0f} MiB, loss {res['losses'][0]:.4f} -> "
                      f"{res['losses'][-1]:.4f}; {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name(), "config": config, "args": vars(args), "results": results}, f, indent=1)
    report(args, config, saved, adapter, impls, results)


def report(args, config, saved, adapter, impls, results):
    name = device_name()
    peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
    print(f"### Fine-tuning on {name}: LlamaForCausalLM {saved['parameters'] / 1e6:.1f} M parameters, "
          f"{args.precision} autocast over float32 weights\n")
    print(f"{args.batch} x {args.seq} tokens a step, {args.steps} timed steps after {args.warmup} warm-up, one "
          f"process, median of {args.rounds} alternated rounds. AdamW lr {args.lr:g}, weight_decay 0.01 (libacc's "
          f"fused; PyTorch's as it comes on CUDA, foreach, and fused where the row says so). LoRA r {LORA_R}, alpha "
          f"{LORA_ALPHA}, all-linear: "
          f"{adapter['trainable'] / 1e6:.2f} M trainable. MFU: model FLOPs (6 per weight and token, 12 L d T for "
          f"attention; LoRA 4 per frozen weight, 6 per adapter weight) over "
          + (f"{peak / 1e12:.0f} TFLOP/s dense bf16." if peak else "an unknown peak (not computed).") + "\n")
    print("| run | tokens/s | ms/step | MFU | peak device memory (MiB) | loss, first -> last |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    med = {}
    for k in impls:
        runs = results[k]
        tps = statistics.median(x["tokens_per_s"] for x in runs)
        mem = statistics.median(x["peak_device_mb"] for x in runs)
        fpt = flops_per_token(config, args.seq, adapter["trainable"], k.endswith("lora"))
        mfu = f"{tps * fpt / peak:.3f}" if peak else "-"
        med[k] = (tps, mem)
        l0 = runs[0]["losses"]
        print(f"| {IMPLS[k]} | {tps:.0f} | {statistics.median(x['step_ms'] for x in runs):.2f} | {mfu} | {mem:.0f} | "
              f"{l0[0]:.4f} -> {l0[-1]:.4f} |")
    print()
    for ours, theirs in (("libacc-full", "accelerate-full"), ("libacc-full", "accelerate-full-fused"),
                         ("libacc-lora", "peft-lora")):
        if ours in med and theirs in med:
            per_round = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(results[ours], results[theirs])]
            diff = max(abs(a - b) for x, y in zip(results[ours], results[theirs])
                       for a, b in zip(x["losses"], y["losses"]))
            print(f"- {IMPLS[ours]} / {IMPLS[theirs]}: tokens/s {med[ours][0] / med[theirs][0]:.2f} "
                  f"({min(per_round):.2f}-{max(per_round):.2f} over rounds), peak device memory "
                  f"{med[ours][1] / med[theirs][1]:.2f}; largest loss difference over steps and rounds {diff:.3g}")


if __name__ == "__main__":
    main()
