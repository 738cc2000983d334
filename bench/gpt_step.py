"""PyTorch and Accelerate side of bench/run.py: the same GPT (libacc's built-in layout), the same
synthetic batches and AdamW, as DDP steps timed after a warm-up. Started by `acc launch`, which sets
torchrun's environment. Usage: gpt_step.py ddp|accelerate STEPS"""
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, BLOCK, WARMUP, V, C, H, L = 16, 64, 10, 256, 128, 4, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(BLOCK, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def batches(rank):
    state = 12345 + rank
    while True:
        xs = []
        for _ in range(BATCH * BLOCK):
            state = (state * 1103515245 + 12345) % 2**32
            xs.append((state >> 16) % 256)
        x = torch.tensor(xs).view(BATCH, BLOCK)
        yield x, (x * 7 + 3) % 256


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = Gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    if mode == "accelerate":
        from accelerate import Accelerator
        accelerator = Accelerator(cpu=True)
        model, opt = accelerator.prepare(model, opt)
        rank, world, backward = accelerator.process_index, accelerator.num_processes, accelerator.backward
        barrier = accelerator.wait_for_everyone
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
        rank, world, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
        backward = lambda loss: loss.backward()
    data = batches(rank)
    for step in range(WARMUP + steps):
        if step == WARMUP:
            barrier()
            t0 = time.perf_counter()
        x, y = next(data)
        loss = model(x, y)
        backward(loss)
        opt.step()
        opt.zero_grad(set_to_none=True)
    barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"impl": f"pytorch-{mode}", "tokens_per_s": round(steps * BATCH * BLOCK * world / seconds, 1),
                          "peak_rss_mb": round(rss, 1)}))


if __name__ == "__main__":
    main()
