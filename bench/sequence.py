#!/usr/bin/env python3
"""Ulysses sequence parallelism beside context parallelism: the same LlamaForCausalLM (random weights saved once by
transformers, as bench/tp.py) trained with AdamW by libacc on 2 CPU processes over Gloo, its sequences split by
sp_size=2 (the heads' all-to-all around attention) and by cp_size=2 (allgather and alltoall: keys and values
gathered, or passed around the ring), each under FSDP2 over the two ranks, at several sequence lengths, alternated
over rounds. Prints tokens/s and the peak tensor bytes per rank (a counting allocator, in a run of its own) per
sequence length and split, and each split's ratio to Ulysses. The program is bench/tp_step.cpp (the mesh from the
variables accelerate launch exports; every rank reads the same batch, as the splits need).

  bash bench/setup.sh && python3 bench/sequence.py [--seqs 256,512,1024] [--rounds 2]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tp  # noqa: E402  (its launch, save_model and sizes)
from run import wait_for_idle  # noqa: E402

SPLITS = {"sp": {"PARALLELISM_CONFIG_SP_SIZE": "2"},
          "cp allgather": {"PARALLELISM_CONFIG_CP_SIZE": "2", "PARALLELISM_CONFIG_CP_COMM_STRATEGY": "allgather"},
          "cp alltoall": {"PARALLELISM_CONFIG_CP_SIZE": "2", "PARALLELISM_CONFIG_CP_COMM_STRATEGY": "alltoall"}}
FSDP2 = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2",
         "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "LlamaDecoderLayer"}


def run(a, model_dir, vocab, seq, split, count_bytes=False):
    # DP_SHARD 1 x TP 2 in tp_step's arguments: both ranks are data-parallel rank 0 (the same batch).
    args = [model_dir, "1", "2", str(vocab), str(a.batch), str(seq), str(a.warmup), str(a.steps), "1e-3"]
    return tp.launch(a, "libacc", 2, args, dict(FSDP2, **SPLITS[split]), count_bytes, a.lock)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", default="256,512,1024")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-busy", type=float, default=0.5)
    ap.add_argument("--build", default=os.path.join(tp.ROOT, "build"))
    ap.add_argument("--lock", help="hold this file's flock during each run (others' builds wait between runs)")
    a = ap.parse_args()
    a.acc, a.tp_step = os.path.join(a.build, "launcher", "acc"), os.path.join(a.build, "bench", "tp_step")
    config = dict(tp.SIZES["default"]["config"], **tp.COMMON_CONFIG)
    seqs = [int(s) for s in a.seqs.split(",")]
    with tempfile.TemporaryDirectory() as d:
        a.dir = d
        model_dir = os.path.join(d, "model")
        tp.save_model(a, model_dir, config)
        speed = {(s, k): [] for s in seqs for k in SPLITS}
        for r in range(a.rounds):
            for s in seqs:
                order = list(SPLITS) if r % 2 == 0 else list(reversed(SPLITS))
                for k in order:
                    wait_for_idle(a.max_busy)
                    speed[(s, k)].append(run(a, model_dir, config["vocab_size"], s, k)[0]["tokens_per_s"])
        peak = {(s, k): max(max(x["bytes"][p] for p in ("forward", "backward", "optimizer"))
                            for x in run(a, model_dir, config["vocab_size"], s, k, True))
                for s in seqs for k in SPLITS}
    c = config
    print(f"\nLlama {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, {c['num_attention_heads']} heads "
          f"({c['num_key_value_heads']} key/value), vocabulary {c['vocab_size']}; AdamW under FSDP2 over 2 processes "
          f"({a.threads} thread each), batch {a.batch}; {a.steps} timed steps after {a.warmup}, median of {a.rounds} "
          "rounds; peak: the largest rank's tensor bytes in any phase.\n")
    print("| sequence | split | tokens/s | / Ulysses | peak tensor MB per rank | / Ulysses |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for s in seqs:
        base_speed, base_peak = statistics.median(speed[(s, "sp")]), peak[(s, "sp")]
        for k in SPLITS:
            v = statistics.median(speed[(s, k)])
            print(f"| {s} | {k} | {tp.fmt(v)} | {v / base_speed:.2f} | {tp.fmt(peak[(s, k)] / tp.MB)} | "
                  f"{peak[(s, k)] / base_peak:.2f} |")


if __name__ == "__main__":
    main()
