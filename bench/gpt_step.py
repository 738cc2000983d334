"""PyTorch and Accelerate side of bench/run.py: the same GPT as libacc's built-in one (GPT-2 layout: pre-norm
blocks, causal attention, GELU MLP, final layer norm, head tied to the token embedding), the same synthetic
batches and AdamW, as DDP (or FSDP2) steps timed per phase after a warm-up, measured as gpt_step.c measures (wall time per phase, and
what of it the main thread spent blocked or runnable without a core). Started by `acc launch`, which sets
torchrun's environment. Usage: gpt_step.py MODE STEPS WARMUP BATCH SEQ VOCAB LAYERS HEADS EMBD (gpt_step.c's
arguments), MODE one of ddp, accelerate, fsdp2, single, each optionally with -fused (AdamW(fused=True) instead of
the default, for-each AdamW). fsdp2: torch.distributed.fsdp.fully_shard on each block, then on the whole model
(FULL_SHARD: parameters resharded after forward), as libacc's FSDP with TRANSFORMER_BASED_WRAP. single: one process
on its own, no process group and no wrapper (run.py's bound: several at once, without communication)."""
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PHASES = ("data", "forward", "backward", "optimizer")


class Block(nn.Module):
    # libacc's Conv1D layers hold [in, out] weights and nn.Linear [out, in]: the same products.
    def __init__(self, c, heads):
        super().__init__()
        self.c, self.heads = c, heads
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        split = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(split(q), split(k), split(v), is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, block, layers, heads, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def load_libacc_weights(model, path):
    """libacc's initial weights (gpt_step.c's BENCH_SAVE_INIT, GPT-2 names, Conv1D [in, out]) into this model."""
    from safetensors.torch import load_file
    w = load_file(path)
    rename = {"c_attn": "c_attn", "attn.c_proj": "c_proj", "mlp.c_fc": "c_fc", "mlp.c_proj": "mlp_proj",
              "ln_1": "ln_1", "ln_2": "ln_2"}
    state = {"wte.weight": w["transformer.wte.weight"], "wpe.weight": w["transformer.wpe.weight"],
             "ln_f.weight": w["transformer.ln_f.weight"], "ln_f.bias": w["transformer.ln_f.bias"]}
    for i in range(len(model.h)):
        for theirs, ours in rename.items():
            prefix = f"transformer.h.{i}." + ("attn." + theirs if theirs == "c_attn" else theirs)
            for kind in ("weight", "bias"):
                t = w[f"{prefix}.{kind}"]
                state[f"h.{i}.{ours}.{kind}"] = t.t().contiguous() if kind == "weight" and t.dim() == 2 else t
    model.load_state_dict(state)


def mix(h):
    """gpt_step.c's 32-bit integer hash, on a uint32 array."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x7FEB352D)
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(0x846CA68B)
    return h ^ (h >> np.uint32(16))


def batch(step, rank, world, b, t, vocab):
    """gpt_step.c's tokens: token i of the run is mix(i) % vocab, targets (x * 7 + 3) % vocab."""
    n = b * t
    base = ((step * world + rank) * n) % 2**32
    i = ((np.arange(n, dtype=np.uint64) + base) % 2**32).astype(np.uint32)
    x = torch.from_numpy((mix(i) % np.uint32(vocab)).astype(np.int64)).view(b, t)
    return x, (x * 7 + 3) % vocab


class Clocks:
    """gpt_step.c's read_clocks: wall clock, the thread's CPU time and its run delay (schedstat), in seconds."""

    def __init__(self):
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = None

    def read(self):
        runq = int(os.pread(self.fd, 96, 0).split()[1]) * 1e-9 if self.fd is not None else 0.0
        return time.clock_gettime(time.CLOCK_MONOTONIC), time.thread_time(), runq


def start_barrier():
    """gpt_step.c's start_barrier: BENCH_START_BARRIER=FILE:N, each process appends a byte and waits for N."""
    path, _, n = os.environ.get("BENCH_START_BARRIER", "").rpartition(":")
    if not path:
        return
    with open(path, "ab") as f:
        f.write(b"x")
    give_up = time.monotonic() + 600
    while os.path.getsize(path) < int(n):
        if time.monotonic() > give_up:
            sys.exit(f"BENCH_START_BARRIER: {path} still has {os.path.getsize(path)} of {n} processes after 600 s")
        time.sleep(0.001)


def main():
    mode, _, variant = sys.argv[1].partition("-")
    if mode not in ("ddp", "accelerate", "fsdp2", "single") or variant not in ("", "fused"):
        sys.exit(f"unknown mode '{sys.argv[1]}' (ddp, accelerate, fsdp2, single; each optionally with -fused)")
    adamw = lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **({"fused": True} if variant else {}))
    steps, warmup, b, t_len, vocab, layers, heads, c = map(int, sys.argv[2:10])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.manual_seed(0)
    model = Gpt(vocab, t_len, layers, heads, c)
    if os.environ.get("BENCH_LOAD_INIT"):
        load_libacc_weights(model, os.environ["BENCH_LOAD_INIT"])
    parameters = sum(p.numel() for p in model.parameters())
    opt = adamw(model.parameters())
    if mode == "accelerate":
        from accelerate import Accelerator
        accelerator = Accelerator(cpu=True)
        model, opt = accelerator.prepare(model, opt)
        rank, world, backward = accelerator.process_index, accelerator.num_processes, accelerator.backward
        barrier = accelerator.wait_for_everyone
    elif mode == "fsdp2":
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for block in model.h:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = adamw(model.parameters())  # over the sharded parameters
        rank, world, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
        backward = lambda loss: loss.backward()
    elif mode == "single":
        rank, world, barrier = 0, 1, start_barrier
        backward = lambda loss: loss.backward()
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
        rank, world, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
        backward = lambda loss: loss.backward()
    clocks = Clocks()
    phase, blocked, runq = ([0.0] * len(PHASES) for _ in range(3))
    record, losses = bool(os.environ.get("BENCH_LOSSES")), []
    for step in range(warmup + steps):
        if step == warmup:
            barrier()
            t0 = time.clock_gettime(time.CLOCK_MONOTONIC)  # gpt_step.c's clock: one for all processes
            phase, blocked, runq = ([0.0] * len(PHASES) for _ in range(3))
        t = [clocks.read()]
        x, y = batch(step, rank, world, b, t_len, vocab)
        t.append(clocks.read())
        loss = model(x, y)
        if record:
            losses.append(loss.item())
        t.append(clocks.read())
        backward(loss)
        del loss
        t.append(clocks.read())
        opt.step()
        opt.zero_grad(set_to_none=True)
        t.append(clocks.read())
        for p in range(len(PHASES)):
            wall, cpu, delay = (t[p + 1][k] - t[p][k] for k in range(3))
            phase[p] += wall
            runq[p] += delay
            blocked[p] += wall - cpu - delay
    barrier()
    end = time.clock_gettime(time.CLOCK_MONOTONIC)
    seconds = end - t0
    if rank == 0:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        per_step = lambda times: {name: round(1e3 * max(s, 0.0) / steps, 4) for name, s in zip(PHASES, times)}
        print(json.dumps({"impl": f"pytorch-{sys.argv[1]}", "parameters": parameters,
                          "threads": str(torch.get_num_threads()),
                          "tokens_per_s": round(steps * b * t_len * world / seconds, 1),
                          "step_ms": round(1e3 * seconds / steps, 4), "peak_rss_mb": round(rss, 1),
                          "phase_ms": per_step(phase), "blocked_ms": per_step(blocked), "runq_ms": per_step(runq),
                          "window": [round(t0, 6), round(end, 6)],
                          **({"losses": losses} if record else {})}))


if __name__ == "__main__":
    main()
