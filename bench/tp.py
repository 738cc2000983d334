#!/usr/bin/env python3
"""Tensor parallelism side by side: the same LlamaForCausalLM (random weights saved once by transformers) trained with
AdamW on CPU processes over Gloo, split by libacc (bench/tp_step.cpp, the C ABI, the mesh from the parallelism_config
that `accelerate launch` exports) and by torch's own parallelize_module with the same plan, with fully_shard over
dp_shard for the 2-D mesh (bench/tp_step.py), alternated over rounds (their order turns every round). Prints, per mesh,
tokens/s, ms per phase, peak RSS per rank and how far the loss curves are apart; then libacc's peak tensor memory per
rank (a counting allocator) beside the model: parameters, gradients and AdamW's moments of this rank's share (the split
weights over tp, the norms whole; FSDP: over dp_shard too, plus the gathered units), plus the activations of one
process training that share alone (the local model: heads, key/value heads, intermediate size and vocabulary over tp).

  bash bench/setup.sh && python3 bench/tp.py [--size default|small] [--meshes tp2,tp4,tp2xdp2] [--rounds 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import run_ranks  # noqa: E402
from run import holding, wait_for_idle  # noqa: E402  (run.py's build lock and its quiet-machine check)

PY = os.path.join(ROOT, ".venv-bench", "bin", "python")

# Each size once: the LlamaConfig (float32, untied head), the tokens per data-parallel rank and step, the steps.
SIZES = {
    "small": dict(config=dict(vocab_size=8000, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=4),
                  batch=2, seq=64, warmup=1, steps=3),
    "default": dict(config=dict(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                                num_attention_heads=8, num_key_value_heads=4),
                    batch=4, seq=128, warmup=2, steps=10),
}
COMMON_CONFIG = dict(max_position_embeddings=2048, tie_word_embeddings=False, dtype="float32")
# name: (dp_shard, tp), laid out as Accelerate's mesh (tp innermost).
MESHES = {"tp2": (1, 2), "tp4": (1, 4), "tp2xdp2": (2, 2)}
IMPLS = {"libacc": "libacc", "pytorch": "PyTorch parallelize_module (+ fully_shard)"}
MB = 1 << 20


def mesh_label(m):
    dp, tp = MESHES[m]
    return f"tp={tp}" + (f" x dp_shard={dp}" if dp > 1 else "")


def libacc_env(dp, tp):
    """The variables accelerate launch exports for parallelism_config (and FSDP2, a unit per decoder layer, for
    dp_shard > 1)."""
    env = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_TP_SIZE": str(tp),
           "PARALLELISM_CONFIG_DP_SHARD_SIZE": str(dp)}
    if dp > 1:
        env.update(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2", FSDP_RESHARD_AFTER_FORWARD="true",
                   FSDP_AUTO_WRAP_POLICY="TRANSFORMER_BASED_WRAP", FSDP_TRANSFORMER_CLS_TO_WRAP="LlamaDecoderLayer")
    return env


def launch(a, impl, procs, step_args, env, count_bytes=False, lock=None):
    """One run on `procs` processes, holding `lock`; every rank's result (BENCH_OUT/rank<R>.json), by rank."""
    out = tempfile.mkdtemp(prefix="run-", dir=a.dir)
    program = [a.tp_step] if impl == "libacc" else [PY, os.path.join(ROOT, "bench", "tp_step.py")]
    cmd = [a.acc, "launch", "--cpu", "--num_processes", str(procs), "--num_cpu_threads_per_process", str(a.threads),
           "--main_process_port", "0", *program, *step_args]
    env = dict(os.environ, ACC_CONFIG_FILE="none", TRANSFORMERS_VERBOSITY="error", BENCH_OUT=out, **env,
               **({"BENCH_COUNT_BYTES": "1"} if count_bytes else {}))
    with holding(lock):
        return run_ranks(cmd, env, out, procs)


def save_model(a, path, config):
    p = subprocess.run([PY, os.path.join(ROOT, "bench", "hf_step.py"), "save", path, json.dumps(config)],
                       capture_output=True, text=True, env=dict(os.environ, TRANSFORMERS_VERBOSITY="error"))
    if p.returncode != 0:
        sys.exit(f"saving {path} failed:\n{p.stdout}{p.stderr}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])["parameters"]


def counts(c, tp):
    """Parameters of one tp rank: the split ones (q/k/v/o, gate/up/down, the embedding, the head) over tp, the
    norms whole."""
    h, i, v, layers = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    d = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    split = 2 * v * h + layers * (2 * h * h + 2 * h * kv + 3 * h * i)
    replicated = layers * 2 * h + h
    return split // tp + replicated, split, replicated


def local_config(c, tp):
    """One tp rank's share as a model of its own: the split dimensions over tp, the head size kept."""
    return dict(c, num_attention_heads=c["num_attention_heads"] // tp, num_key_value_heads=c["num_key_value_heads"] // tp,
                head_dim=c["hidden_size"] // c["num_attention_heads"], intermediate_size=c["intermediate_size"] // tp,
                vocab_size=c["vocab_size"] // tp)


def loss_difference(libacc_runs, pytorch_runs):
    """The largest absolute and relative difference between the two sides' losses, over ranks, steps and rounds."""
    diff = rel = 0.0
    for ours, theirs in zip(libacc_runs, pytorch_runs):
        for x, y in zip(ours, theirs):
            if len(x["losses"]) != len(y["losses"]):
                sys.exit("the loss curves differ in length")
            for p, q in zip(x["losses"], y["losses"]):
                diff, rel = max(diff, abs(p - q)), max(rel, abs(p - q) / abs(q))
    return diff, rel


def fmt(v):
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def speed_report(a, size, results, meshes, impls):
    print(f"\n### Speed: {a.threads} thread per process, {size['batch']} x {size['seq']} tokens per data-parallel rank "
          f"and step, {size['steps']} timed steps after {size['warmup']}; median of {a.rounds} alternated rounds; times "
          "are rank 0's ms per step; peak RSS: the largest rank's VmHWM.\n")
    both = set(IMPLS) <= set(impls)
    print("| mesh | processes | implementation | tokens/s | step (ms) | forward (ms) | backward (ms) | optimizer (ms) "
          "| peak RSS per rank (MB) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = {}
    for m in meshes:
        dp, tp = MESHES[m]
        med = {}
        for k in impls:
            runs = results[m][k]
            med[k] = {"tokens_per_s": statistics.median(r[0]["tokens_per_s"] for r in runs),
                      "step_ms": statistics.median(r[0]["step_ms"] for r in runs),
                      "peak": statistics.median(max(x["peak_rss_mb"] for x in r) for r in runs),
                      **{p: statistics.median(r[0]["phase_ms"][p] for r in runs)
                         for p in ("forward", "backward", "optimizer")}}
            v = med[k]
            print(f"| {mesh_label(m)} | {dp * tp} | {IMPLS[k]} | {fmt(v['tokens_per_s'])} | {fmt(v['step_ms'])} | "
                  f"{fmt(v['forward'])} | {fmt(v['backward'])} | {fmt(v['optimizer'])} | {fmt(v['peak'])} |")
        if both:
            per_round = [x[0]["tokens_per_s"] / y[0]["tokens_per_s"]
                         for x, y in zip(results[m]["libacc"], results[m]["pytorch"])]
            l, p = med["libacc"], med["pytorch"]
            ratios[m] = (l["tokens_per_s"] / p["tokens_per_s"], min(per_round), max(per_round))
            print(f"| {mesh_label(m)} | | libacc / PyTorch | {ratios[m][0]:.2f} ({ratios[m][1]:.2f}-{ratios[m][2]:.2f}) | "
                  f"{l['step_ms'] / p['step_ms']:.2f} | {l['forward'] / p['forward']:.2f} | "
                  f"{l['backward'] / p['backward']:.2f} | {l['optimizer'] / p['optimizer']:.2f} | "
                  f"{l['peak'] / p['peak']:.2f} |")
    quiet = [r[0]["quiet"] for m in meshes for k in impls for r in results[m][k]]
    print(f"\nBefore each run the other processes used {min(q['busy_cores'] for q in quiet):.2f}-"
          f"{max(q['busy_cores'] for q in quiet):.2f} cores (load average {min(q['load1'] for q in quiet):.2f}-"
          f"{max(q['load1'] for q in quiet):.2f}).")
    if both:
        print()
        for m in meshes:
            diff, rel = loss_difference(results[m]["libacc"], results[m]["pytorch"])
            l0, p0 = results[m]["libacc"][0][0]["losses"], results[m]["pytorch"][0][0]["losses"]
            print(f"- {mesh_label(m)}: loss curves ({len(l0)} steps, every rank, every round): rank 0 libacc "
                  f"{l0[0]:.6f} -> {l0[-1]:.6f}, PyTorch {p0[0]:.6f} -> {p0[-1]:.6f}; largest difference {diff:.3g} "
                  f"({rel:.2g} relative).")
    return ratios


def memory(a, size, config, meshes, model_dir):
    """libacc's peak tensor bytes per rank in each mesh beside the model; the local models' runs give the
    activations."""
    tail = [str(size["batch"]), str(size["seq"]), "1", "2", str(a.lr)]
    refs = {}
    for tp in sorted({MESHES[m][1] for m in meshes}):
        local = local_config(config, tp)
        path = os.path.join(a.dir, f"local-tp{tp}")
        save_model(a, path, local)
        r = launch(a, "libacc", 1, [path, "1", "1", str(local["vocab_size"]), *tail], {}, True, a.lock)[0]
        shutil.rmtree(path)
        p_local = r["local_parameters"]
        if p_local != counts(config, tp)[0]:
            sys.exit(f"the tp={tp} local model has {p_local} parameters, a rank's share {counts(config, tp)[0]}")
        # The forward's high-water mark less what is held then: the parameters allocated (a loaded model's are
        # mapped from its file, not allocated) and AdamW's two moments (zero_grad freed the gradients).
        refs[tp] = r["bytes"]["forward"] - r["bytes"]["after_prepare"] - 8 * p_local
    rows = []
    for m in meshes:
        dp, tp = MESHES[m]
        ranks = launch(a, "libacc", dp * tp, [model_dir, str(dp), str(tp), str(config["vocab_size"]), *tail],
                       libacc_env(dp, tp), True, a.lock)
        p_local, split, replicated = counts(config, tp)
        got = ranks[0]["local_parameters"]
        h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
        d = h // config["num_attention_heads"]
        # FSDP: the states of 1 / dp of the share, and the gathered units: the root (embedding, head, final norm)
        # and a decoder layer, each this rank's tp share whole while it runs; with prefetching the next one too.
        root = (2 * config["vocab_size"] * h) // tp + h
        layer = (2 * h * h + 2 * h * config["num_key_value_heads"] * d + 3 * h * i) // tp + 2 * h
        gathered = 4 * (root + layer) if dp > 1 else 0
        states = p_local / dp
        act = refs[tp]
        # The forward gives back the whole logits (transformers' colwise_gather_output head), gathered on every rank
        # while the loss reads its vocabulary slice: held to the end of the forward.
        whole_logits = 4 * size["batch"] * size["seq"] * config["vocab_size"]
        forward_model = 12 * states + gathered + act + whole_logits
        step_model = 16 * states + gathered
        predicted = max(forward_model, step_model)
        peaks = [max(r["bytes"][p] for p in ("forward", "backward", "optimizer")) for r in ranks]
        peak = max(peaks)
        where = max(("forward", "backward", "optimizer"), key=lambda p: max(r["bytes"][p] for r in ranks))
        rows.append((m, got, p_local, states, act, whole_logits, gathered, forward_model, step_model, predicted, peak, where,
                     max(r["peak_rss_mb"] for r in ranks), max(r["bytes"]["prepare_peak"] for r in ranks)))
    print(f"\n### Memory: libacc's peak tensor bytes per rank (every CPU tensor's storage through a counting allocator; "
          f"the largest rank, over steps 1-3), {size['batch']} x {size['seq']} tokens per rank, AdamW fp32\n")
    print("| mesh | parameters per rank (counted by libacc / model) | states: 4 + 4 + 8 bytes x parameters (MiB) | "
          "activations, the local model alone (MiB) | whole logits (MiB) | gathered units (MiB) | model: forward "
          "12 P + act + logits / step 16 P (MiB) | measured peak (MiB, phase) | measured / model | peak RSS per rank "
          "(MB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (m, got, p_local, states, act, logits, gathered, fwd, step, pred, peak, where, rss, prep) in rows:
        print(f"| {mesh_label(m)} | {got} / {p_local} | {16 * states / MB:.1f} | {act / MB:.1f} | {logits / MB:.1f} | "
              f"{gathered / MB:.1f} | {fwd / MB:.1f} / {step / MB:.1f} | {peak / MB:.1f} ({where}) | {peak / pred:.3f} "
              f"| {rss:.0f} |")
    print("\n- prepare's own peak (the whole model broadcast from rank 0, then split): "
          + ", ".join(f"{mesh_label(r[0])} {r[13] / MB:.1f} MiB" for r in rows))
    return [(r[0], r[10] / r[9]) for r in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    ap.add_argument("--meshes", default=",".join(MESHES), help="subset of " + ",".join(MESHES))
    ap.add_argument("--impls", default=",".join(IMPLS), help="subset of " + ",".join(IMPLS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (OMP_NUM_THREADS)")
    ap.add_argument("--steps", type=int, help="timed steps per run (default: the size's)")
    ap.add_argument("--warmup", type=int, help="untimed steps before them (default: the size's)")
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of both sides")
    ap.add_argument("--memory", choices=("yes", "no", "only"), default="yes",
                    help="libacc's peak tensor memory beside the model (after the timed rounds)")
    ap.add_argument("--max-busy", type=float, default=0.2,
                    help="before every timed run, wait (up to 60 s) until the machine used at most this many cores "
                    "over a second (run.py's check; negative: do not wait)")
    ap.add_argument("--lock", help="hold this file's flock during each mesh's runs of a round, and each memory run "
                    "(the shared build lock)")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build", "bench-tp"),
                    help="scratch directory: the models are saved there, removed at the end")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", help="write every run's result there")
    ap.add_argument("--check", type=float, metavar="TOL",
                    help="a test (meson's tp-bench-losses): exit 1 when libacc's and PyTorch's losses differ by more "
                    "than TOL (relative), 77 (skipped) without .venv-bench")
    a = ap.parse_args()
    if not os.path.exists(PY):
        sys.exit(77 if a.check is not None else f"{PY} is missing: run bash bench/setup.sh first")
    meshes, impls = a.meshes.split(","), a.impls.split(",")
    for given, known in ((meshes, MESHES), (impls, IMPLS)):
        for x in given:
            if x not in known:
                sys.exit(f"unknown '{x}' (known: {', '.join(known)})")
    if a.check is not None and set(impls) != set(IMPLS):
        sys.exit("--check compares libacc with PyTorch: --impls must hold both")
    size = dict(SIZES[a.size])
    for k in ("steps", "warmup"):
        if getattr(a, k) is not None:
            size[k] = getattr(a, k)
    config = dict(size["config"], **COMMON_CONFIG)
    build = os.path.abspath(a.build)
    a.acc, a.tp_step = os.path.join(build, "launcher", "acc"), os.path.join(build, "bench", "tp_step")
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    model_dir = os.path.join(a.dir, "model")
    results = {m: {k: [] for k in impls} for m in meshes}
    try:
        parameters = save_model(a, model_dir, config)
        if parameters != sum(counts(config, 1)[1:]):
            sys.exit(f"the model has {parameters} parameters, the count here {sum(counts(config, 1)[1:])}")
        print(f"LlamaForCausalLM `{a.size}`: {parameters / 1e6:.2f} M parameters (hidden {config['hidden_size']}, "
              f"intermediate {config['intermediate_size']}, {config['num_hidden_layers']} layers, "
              f"{config['num_attention_heads']} heads ({config['num_key_value_heads']} key/value), vocab "
              f"{config['vocab_size']}, untied head), float32; AdamW lr {a.lr:g}, weight_decay 0.01", flush=True)
        ratios, fits = {}, []
        if a.memory != "only":
            for r in range(a.rounds):
                for m in meshes:
                    dp, tp = MESHES[m]
                    args = [model_dir, str(dp), str(tp), str(config["vocab_size"]), str(size["batch"]),
                            str(size["seq"]), str(size["warmup"]), str(size["steps"]), str(a.lr)]
                    # Both sides under one hold of the lock: the same conditions, and fewer waits for it.
                    with holding(a.lock):
                        for k in impls[r % len(impls):] + impls[:r % len(impls)]:
                            quiet = wait_for_idle(a.max_busy) if a.max_busy >= 0 else {
                                "busy_cores": -1.0, "load1": os.getloadavg()[0], "waited_s": 0}
                            t = time.monotonic()
                            ranks = launch(a, k, dp * tp, args, libacc_env(dp, tp) if k == "libacc" else {})
                            ranks[0]["quiet"] = quiet
                            results[m][k].append(ranks)
                            print(f"round {r + 1} {mesh_label(m):16s} {k:8s} {ranks[0]['tokens_per_s']:9.1f} tokens/s, "
                                  f"{ranks[0]['step_ms']:8.1f} ms/step ({', '.join(f'{p} {v:.1f}' for p, v in ranks[0]['phase_ms'].items())}), "
                                  f"peak RSS per rank {', '.join(str(x['peak_rss_mb']) for x in ranks)} MB; "
                                  f"{time.monotonic() - t:.0f} s; before: {quiet['busy_cores']:.2f} cores busy, load average "
                                  f"{quiet['load1']:.2f}", file=sys.stderr,
                                  flush=True)
                if a.json:
                    with open(a.json, "w") as f:
                        json.dump({"size": a.size, "config": config, "results": results}, f, indent=1)
            ratios = speed_report(a, size, results, meshes, impls)
        if a.memory != "no" and "libacc" in impls:
            fits = memory(a, size, config, meshes, model_dir)
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)
    if a.check is not None:
        for m in meshes:
            diff, rel = loss_difference(results[m]["libacc"], results[m]["pytorch"])
            if not rel <= a.check:
                sys.exit(f"{mesh_label(m)}: libacc's and PyTorch's losses differ by {rel:.3g} relative (more than "
                         f"{a.check:g})")


if __name__ == "__main__":
    main()
