#!/usr/bin/env python3
"""Peak tensor memory per rank: DDP and ZeRO stages 1, 2, 3 against the ZeRO paper's model.

Runs bench/zero_memory (libacc's GPT, AdamW, fp32) with `acc launch --num_processes N` under each strategy, chosen
by an Accelerate config file as a user writes it, and prints per strategy the largest rank's peak tensor bytes
beside the model (P parameters, N processes, fp32 with Adam's two moments):

    DDP     16 P            (parameters 4, gradients 4, moments 8) + its 4 P of gradient buckets
    ZeRO-1  4 P + 4 P + 8 P / N
    ZeRO-2  4 P + 12 P / N
    ZeRO-3  16 P / N + the largest unit's gathered parameters (4 bytes each)

each plus the activations, measured as what one process's forward adds to its parameters and moments (their
high-water mark). Bytes are counted by a reporting allocator (bench/zero_memory.cpp), not RSS.

    python3 bench/zero_memory.py              # 4 processes, a GPT of 98.5 M parameters (about 2 minutes)
    python3 bench/zero_memory.py --layers 2 --embd 128 --heads 4 --vocab 512   # quick
    python3 bench/zero_memory.py --at-peak    # and what is live at each run's peak (rank 0)

Then FSDP FULL_SHARD with and without fsdp_activation_checkpointing: the forward's high-water mark per rank.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {
    "DDP": None,
    "ZeRO-1": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n",
    "ZeRO-2": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n",
    "ZeRO-3": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n",
}
# FSDP's activation checkpointing (fsdp_activation_checkpointing): the blocks keep only their inputs in forward.
FSDP = ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block\n")
CHECKPOINTING = {"FSDP FULL_SHARD": FSDP, "FSDP FULL_SHARD + activation checkpointing":
                 FSDP + "  fsdp_activation_checkpointing: true\n"}


def run(args, n, config, tmp):
    cmd = [os.path.join(args.build, "launcher", "acc"), "launch", "--num_processes", str(n), "--main_process_port", "0"]
    if config is None:
        cmd.append("--cpu")
    else:
        path = os.path.join(tmp, "config.yaml")
        with open(path, "w") as f:
            f.write(config + "use_cpu: true\n")
        cmd += ["--config_file", path]
    cmd += [os.path.join(args.build, "bench", "zero_memory"), *map(str, (args.layers, args.embd, args.heads, args.vocab,
                                                                       args.seq, args.batch, args.steps))]
    env = dict(os.environ, ACC_CONFIG_FILE="none", **({"ZERO_MEMORY_AT_PEAK": "1"} if args.at_peak else {}))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    for line in re.findall(r"^AT_PEAK .*$", p.stdout, re.M):
        print(f"  rank 0, {line}")
    return [json.loads(m) for m in re.findall(r"^MEM (.*)$", p.stdout, re.M)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--layers", type=int, default=13)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2, help="the second step has Adam's moments from the first")
    ap.add_argument("--at-peak", action="store_true", help="print the sizes of the tensors live at rank 0's peak")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    args = ap.parse_args()
    n = args.processes
    mb = 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        # The activations: what one process's forward adds to its parameters and moments (12 P; the gradients
        # were freed by zero_grad), at their high-water mark, the end of the forward.
        single = run(args, 1, None, tmp)[0]
        P = single["params"]
        act = single["forward"] - 12 * P
        # The largest unit ZeRO-3 gathers: the root (embeddings, final norm) or a block.
        block = 12 * args.embd * args.embd + 13 * args.embd
        root = (args.vocab + args.seq) * args.embd + 2 * args.embd
        largest = 4 * max(root, block)
        model = {"DDP": 16 * P + 4 * P, "ZeRO-1": 8 * P + 8 * P / n, "ZeRO-2": 4 * P + 12 * P / n,
                 "ZeRO-3": 16 * P / n + largest}
        print(f"GPT {P / 1e6:.1f} M parameters, AdamW fp32, {n} processes; activations {act / mb:.0f} MiB "
              f"(1 process); largest unit {largest / mb:.0f} MiB\n")
        print("| strategy | peak per rank (MiB, max over ranks) | model + activations (MiB) | measured / model |")
        print("| --- | ---: | ---: | ---: |")
        for name, config in CONFIGS.items():
            ranks = run(args, n, config, tmp)
            peak = max(r["peak"] for r in ranks)
            want = model[name] + act
            print(f"| {name} | {peak / mb:.0f} | {want / mb:.0f} | {peak / want:.3f} |", flush=True)
        # Activation checkpointing: the forward's high-water mark falls by the blocks' activations, less their inputs
        # (batch x seq x embd floats per block) that stay; backward holds one block's activations at a time.
        print("\n| FSDP (no prefetch) | forward's high-water mark (MiB) | peak per rank (MiB) | peak / ZeRO-3 model |")
        print("| --- | ---: | ---: | ---: |")
        forward = {}
        for name, config in CHECKPOINTING.items():
            ranks = run(args, n, config, tmp)
            forward[name] = max(r["forward"] for r in ranks)
            peak = max(r["peak"] for r in ranks)
            print(f"| {name} | {forward[name] / mb:.0f} | {peak / mb:.0f} | {peak / (model['ZeRO-3'] + act):.3f} |",
                  flush=True)
        kept = args.layers * args.batch * args.seq * args.embd * 4
        saved = forward["FSDP FULL_SHARD"] - forward["FSDP FULL_SHARD + activation checkpointing"]
        print(f"\nactivation checkpointing keeps {saved / mb:.1f} MiB less in forward ({saved / act:.0%} of the "
              f"activations; the blocks' inputs it keeps: {kept / mb:.1f} MiB)")


if __name__ == "__main__":
    main()
