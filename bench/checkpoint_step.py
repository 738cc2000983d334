"""Accelerate side of bench/checkpoint.py: one process builds the same MLP as checkpoint_step.c (LAYERS square
WIDTH x WIDTH nn.Linear layers with bias, ReLU between, float32), an AdamW over it, Accelerator(cpu=True).prepare
of both, one optimizer step (so exp_avg and exp_avg_sq exist), then times accelerator.save_state(DIR) (its
defaults: safe_serialization, so model.safetensors; the optimizer through torch.save) and load_state(DIR): a
warm load and, when DROP is 1, a cold one after `sync` and dropping the page cache (needs root). Prints one
JSON line as checkpoint_step.c does.
  checkpoint_step.py WIDTH LAYERS DIR DROP"""
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
from accelerate import Accelerator


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    width, layers, ckpt, drop = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    torch.manual_seed(0)
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width))
        if i + 1 < layers:
            mods.append(nn.ReLU())
    model = nn.Sequential(*mods)
    parameters = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    accelerator = Accelerator(cpu=True)
    model, opt = accelerator.prepare(model, opt)
    x = ((torch.arange(width) * 37 % 101 - 50).float() / 50).view(1, width)
    loss = nn.functional.mse_loss(model(x), x)
    accelerator.backward(loss)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss

    t = time.perf_counter()
    accelerator.save_state(ckpt)
    save = time.perf_counter() - t
    os.sync()  # Accelerate does not fsync: save_sync_s is the time until the checkpoint is on disk
    save_sync = time.perf_counter() - t
    nbytes = dir_bytes(ckpt)
    t = time.perf_counter()
    accelerator.load_state(ckpt)
    load_warm = time.perf_counter() - t
    load_cold = -1.0
    if drop:
        drop_caches()
        t = time.perf_counter()
        accelerator.load_state(ckpt)
        load_cold = time.perf_counter() - t
    print(json.dumps({"impl": "accelerate", "parameters": parameters, "bytes": nbytes, "save_s": round(save, 4), "save_sync_s": round(save_sync, 4),
                      "load_warm_s": round(load_warm, 4), "load_cold_s": round(load_cold, 4)}))


if __name__ == "__main__":
    main()
