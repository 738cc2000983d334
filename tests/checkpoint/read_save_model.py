#!/usr/bin/env python3
"""Reads acc_save_model's files with the safetensors package's numpy API (no torch): the unsharded
model.safetensors and the shards of a "2KB" save hold every tensor of the model's state, equal to the values
acc_tensor_to_host gives and to acc_model_save_safetensors's file; the index's total_size and weight_map match
the shards; every file has {"format": "pt"} metadata.

Usage: read_save_model.py TEST_SAVE_MODEL   (tests/c/test_save_model; run with .venv-test's Python)
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(ROOT, ".venv-test", "bin", "python")
if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(ROOT, ".venv-test")):
    os.execv(VENV_PYTHON, [VENV_PYTHON, *sys.argv])

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as e:  # no .venv-test: scripts/setup.sh makes it
    print(f"SKIP: safetensors/numpy are not installed ({e}); run scripts/setup.sh --tests for .venv-test")
    sys.exit(77)

sys.path.insert(0, os.path.join(ROOT, "tests"))
from checks import expect, finish  # noqa: E402


def metadata(path):
    with safe_open(path, framework="numpy") as f:
        return f.metadata()


with tempfile.TemporaryDirectory(prefix="acc-save-model-") as d:
    subprocess.run([sys.argv[1], d], check=True)
    names = open(os.path.join(d, "raw", "names.txt")).read().split("\n")[:-1]
    reference = load_file(os.path.join(d, "reference.safetensors"))
    expect(list(reference) == sorted(names) or set(reference) == set(names), "reference names")
    expect("transformer.wte.weight" in names and not any("lm_head" in n for n in names), "tied head not in the state")
    raw = {}
    for i, name in enumerate(names):
        raw[name] = np.fromfile(os.path.join(d, "raw", f"{i}.bin"), dtype=np.float32)

    def check_tensors(tensors, where):
        expect(set(tensors) == set(names), f"{where}: the state's names", f"{sorted(set(tensors) ^ set(names))}")
        for name, t in tensors.items():
            if name not in raw:
                continue
            expect(t.dtype == np.float32, f"{where}: {name} dtype", str(t.dtype))
            expect(t.shape == reference[name].shape, f"{where}: {name} shape", f"{t.shape} {reference[name].shape}")
            expect(np.array_equal(t.reshape(-1), raw[name]), f"{where}: {name} values (acc_tensor_to_host)")
            expect(np.array_equal(t, reference[name]), f"{where}: {name} values (acc_model_save_safetensors)")

    full = os.path.join(d, "full")
    expect(sorted(os.listdir(full)) == ["model.safetensors"], "unsharded: one file", str(os.listdir(full)))
    check_tensors(load_file(os.path.join(full, "model.safetensors")), "model.safetensors")
    expect(metadata(os.path.join(full, "model.safetensors")) == {"format": "pt"}, "unsharded metadata")

    sharded = os.path.join(d, "sharded")
    files = sorted(os.listdir(sharded))
    shards = [f for f in files if f != "model.safetensors.index.json"]
    n = len(shards)
    expect(n > 1 and "model.safetensors.index.json" in files, "sharded: shards and an index", str(files))
    expect(shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)], "shard names", str(shards))
    index = json.load(open(os.path.join(sharded, "model.safetensors.index.json")))
    expect(sorted(index) == ["metadata", "weight_map"], "index keys", str(sorted(index)))
    merged, total, order = {}, 0, []
    for shard in shards:
        path = os.path.join(sharded, shard)
        expect(metadata(path) == {"format": "pt"}, f"{shard} metadata")
        tensors = load_file(path)
        for name, t in tensors.items():
            expect(name not in merged, f"{name} in one shard only")
            expect(index["weight_map"].get(name) == shard, f"weight_map[{name}]", str(index["weight_map"].get(name)))
            merged[name] = t
            total += t.nbytes
        size = sum(t.nbytes for t in tensors.values())
        expect(size <= 2000 or len(tensors) == 1, f"{shard}: at most 2KB or one tensor", str(size))
    expect(set(index["weight_map"]) == set(names), "weight_map names every tensor")
    expect(index["metadata"] == {"total_size": total}, "index total_size", f"{index['metadata']} != {total}")
    check_tensors(merged, "shards")
    # The split as huggingface_hub's split_torch_state_dict_into_shards makes it, in the state's order.
    sizes = [raw[name].nbytes for name in names]
    plan, current, current_size = [], [], 0
    for name, size in zip(names, sizes):
        if size > 2000:
            plan.append([name])
            continue
        if current_size + size > 2000:
            plan.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        plan.append(current)
    want = {name: f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i, names_ in enumerate(plan) for name in names_}
    expect(index["weight_map"] == want, "the split matches huggingface_hub's")

finish()
