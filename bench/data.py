#!/usr/bin/env python3
"""Dataset files to batches (issue 39 item 6): JSONL -> tokenized, padded or packed batches, libacc beside datasets +
transformers + a PyTorch DataLoader with the same tokenizer, in the same run, on the same file.

Workloads (each side makes the same batches: token counts and a checksum of the ids are compared):
  - pad:  tok(text, truncation=True, max_length=512) as datasets.map(batched=True, num_proc=P), then
          DataCollatorForLanguageModeling(mlm=False) batches of 8 (labels, padded to the longest row);
          libacc: acc_dataset_from_files {"mode": "tokenize", "truncation": true, "max_length": 512,
          "collator": "language_modeling", "threads": P}.
  - pack: tokenized, then run_clm's group_texts into blocks of 1024 (datasets.map(batched=True, num_proc=P)), then
          default_data_collator batches of 8; libacc: {"mode": "group_texts", "block_size": 1024, "threads": P}.
Python runs load_dataset("json") into a fresh cache folder, map with num_proc=P (caching off) and a
DataLoader(num_workers=P) that collates; libacc runs bench/data_bench (the loader reads and copies every batch).
Every side's time covers the whole path: file to the last batch, the tokenizer loaded before. Rounds alternate the
order; the table gives medians and libacc / Python (above 1: libacc faster).

  bash bench/setup.sh && python3 bench/data.py [--tokenizer llama3] [--rows 20000] [--rounds 3] [--procs 2]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = os.path.join(ROOT, ".venv-bench", "bin", "python")
CACHE = os.path.join(os.environ.get("ACC_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "libacc"), "tokenizers")

WORDS = ("the of and to in is that it for was on are as with his they at be this have from or one had by word but not "
         "what all were we when your can said there use an each which she do how their if will up other about out "
         "many then them these so some her would make like him into time has look two more write go see number no "
         "way could people my than first water been call who oil its now find long down day did get come made may "
         "part").split()


def corpus(path, rows, seed=7):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(rows):
            n = rng.randint(20, 600)
            text = " ".join(rng.choice(WORDS) for _ in range(n))
            if i % 7 == 0:
                text += " 12345 + 678 = 13023; données, 日本語のテキスト."
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")


PYTHON_SIDE = r'''
import json, sys, tempfile, time, os
import datasets, torch
from transformers import AutoTokenizer, DataCollatorForLanguageModeling, default_data_collator
path, folder, workload, procs, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
datasets.disable_caching()
datasets.logging.set_verbosity_error()
datasets.disable_progress_bars()
tok = AutoTokenizer.from_pretrained(folder)
if tok.pad_token is None:
    tok.pad_token = tok.eos_token
t0 = time.perf_counter()
with tempfile.TemporaryDirectory() as cache:
    ds = datasets.load_dataset("json", data_files=path, split="train", cache_dir=cache)
    if workload == "pad":
        ds = ds.map(lambda b: tok(b["text"], truncation=True, max_length=512), batched=True, num_proc=procs,
                    remove_columns=["text"])
        collate = DataCollatorForLanguageModeling(tok, mlm=False)
    else:
        ds = ds.map(lambda b: tok(b["text"]), batched=True, num_proc=procs, remove_columns=["text"])
        def group_texts(examples, block_size=1024):
            concatenated = {k: sum(examples[k], []) for k in examples.keys()}
            total = (len(concatenated[list(examples.keys())[0]]) // block_size) * block_size
            result = {k: [t[i:i + block_size] for i in range(0, total, block_size)] for k, t in concatenated.items()}
            result["labels"] = result["input_ids"].copy()
            return result
        ds = ds.map(group_texts, batched=True, num_proc=procs)
        collate = default_data_collator
    t1 = time.perf_counter()
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, collate_fn=collate, num_workers=procs)
    rows = batches = tokens = 0
    checksum = 0
    for b in dl:
        ids = b["input_ids"]
        rows += ids.shape[0]
        tokens += ids.numel()
        batches += 1
        if batches <= 3:
            checksum = (checksum * 1000003 + int(ids.sum())) % (1 << 61)
    t2 = time.perf_counter()
print(json.dumps({"build_s": t1 - t0, "batch_s": t2 - t1, "rows": rows, "batches": batches, "tokens": tokens}))
'''


def run_libacc(build, path, folder, workload, procs, batch):
    options = ({"mode": "tokenize", "truncation": True, "max_length": 512, "collator": "language_modeling"}
               if workload == "pad" else {"mode": "group_texts", "block_size": 1024})
    options["threads"] = procs
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    eos = cfg.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    if cfg.get("pad_token") is None and workload == "pad":
        options["pad_token"] = eos  # as the Python side: tok.pad_token = tok.eos_token
    cmd = [os.path.join(build, "bench", "data_bench"), path, folder, json.dumps(options), str(batch)]
    return timed("data_bench", cmd, OMP_NUM_THREADS="1")


def run_python(path, folder, workload, procs, batch):
    return timed("python side", [PY, "-c", PYTHON_SIDE, path, folder, workload, str(procs), str(batch)],
                 TOKENIZERS_PARALLELISM="true", OMP_NUM_THREADS="1")


def timed(what, cmd, **env):
    """A side's run: the JSON of its last line, with its wall time as "wall_s"."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env))
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{what} failed: {p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["wall_s"] = wall
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workloads", default="pad,pack")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json")
    a = ap.parse_args()
    folder = os.path.join(CACHE, a.tokenizer)
    if not os.path.isdir(folder):
        sys.exit(f"{folder} missing: run tests/text/fetch_tokenizers.sh")
    results = {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "train.jsonl")
        corpus(path, a.rows)
        size = os.path.getsize(path)
        print(f"corpus: {a.rows} rows, {size / 2**20:.1f} MiB of JSON lines; tokenizer {a.tokenizer}; "
              f"{a.procs} processes / threads a side; batches of {a.batch}")
        for w in a.workloads.split(","):
            runs = {"libacc": [], "python": []}
            for r in range(a.rounds):
                order = ("libacc", "python") if r % 2 == 0 else ("python", "libacc")
                for side in order:
                    res = (run_libacc(a.build, path, folder, w, a.procs, a.batch) if side == "libacc"
                           else run_python(path, folder, w, a.procs, a.batch))
                    runs[side].append(res)
            lib, py = runs["libacc"][0], runs["python"][0]
            same = (lib["rows"], lib["batches"], lib["tokens"]) == (py["rows"], py["batches"], py["tokens"])
            t_lib = statistics.median(x["build_s"] + x["batch_s"] for x in runs["libacc"])
            t_py = statistics.median(x["build_s"] + x["batch_s"] for x in runs["python"])
            ratios = [p["build_s"] + p["batch_s"] for p in runs["python"]]
            ratios = [rp / (l["build_s"] + l["batch_s"]) for rp, l in zip(ratios, runs["libacc"])]
            results[w] = {"libacc_s": t_lib, "python_s": t_py, "ratio": t_py / t_lib, "ratio_min": min(ratios),
                          "ratio_max": max(ratios), "rows": lib["rows"], "batches": lib["batches"],
                          "tokens": lib["tokens"], "same_batches": same, "libacc": runs["libacc"],
                          "python": runs["python"]}
            print(f"{w}: libacc {t_lib:.2f} s ({lib['tokens'] / t_lib / 1e6:.2f} M tokens/s), python {t_py:.2f} s "
                  f"({py['tokens'] / t_py / 1e6:.2f} M tokens/s): {t_py / t_lib:.1f}x "
                  f"[{min(ratios):.1f}-{max(ratios):.1f}]; {lib['batches']} batches, {lib['tokens']} tokens, "
                  f"{'same' if same else 'DIFFERENT'} counts as Python "
                  f"(libacc build {statistics.median(x['build_s'] for x in runs['libacc']):.2f} s + batches "
                  f"{statistics.median(x['batch_s'] for x in runs['libacc']):.2f} s; python map "
                  f"{statistics.median(x['build_s'] for x in runs['python']):.2f} s + loader "
                  f"{statistics.median(x['batch_s'] for x in runs['python']):.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
