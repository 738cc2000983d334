"""PyTorch side of bench/pipeline.py: pipeline parallelism on a Hugging Face LlamaForCausalLM with
torch.distributed.pipelining (PipelineStage and ScheduleGPipe / Schedule1F1B, or the multi-stage
ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble), started by torchrun over Gloo; or, with SCHEDULE "single",
the whole model in one process (the bubble's reference).

  pipeline_step.py MODEL_DIR SCHEDULE MICROBATCHES SPLITS VOCAB BATCH SEQ WARMUP STEPS LR

The model (AutoModelForCausalLM.from_pretrained, float32) is cut as libacc cuts it at SPLITS (libacc's
pp_split_points: "4", or "2,5,7" for 4 stages): stage 0 holds the token embedding and the decoder layers before the
first split, each next stage the layers up to the next one, the last stage also the final norm and the head; rank r
holds stages r, r + world, ... (torch's loop placement). Each stage is a module of its own that runs LlamaModel.forward's steps on its part (the
embedding, the rotary embedding of positions 0..SEQ-1, its decoder layers with no mask: SDPA's causal attention, and
on the last stage the norm and the head); the loss is transformers' shifted cross entropy (labels: the tokens shifted
by one, -100 at the end), the mean over each micro-batch, and the schedule's scale_grads divides the gradients by the
micro-batches: the mean over the batch, as libacc's. AdamW (lr LR, weight_decay 0.01) over the stage's parameters,
fused (libacc's kernel) unless BENCH_ADAMW=foreach (torch's default).

Each step: BATCH x SEQ tokens (tp_step.cpp's: token i is mix(i) % VOCAB, the same batch at every step and on every
rank), schedule.step (rank 0 the input, rank 1 the target and the losses; return_outputs=False), the mean loss
broadcast from the last stage to every rank (as libacc reports it everywhere), optimizer step, zero_grad. WARMUP
untimed steps, then STEPS timed between barriers. Every rank writes BENCH_OUT/rank<R>.json (tp_step.cpp's keys):
tokens/s of the job, ms per phase ("forward": the schedule's step, forward and backward of every micro-batch, or the
single process's forward; "backward": the loss broadcast, or the single process's backward; "optimizer"), peak
resident memory (VmHWM), its loss at every step, its local parameter count."""
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from lora_step import status_mb, tokens  # step.h's tokens and /proc/self/status, as the other benches read them


class Stage(nn.Module):
    """One stage of a LlamaForCausalLM: what LlamaModel.forward (and the head) does, on the layers [begin, end)."""

    def __init__(self, model, begin, end, first, last):
        super().__init__()
        inner = model.model
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = nn.ModuleList(inner.layers[begin:end])
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.lm_head = model.lm_head if last else None

    def forward(self, x):
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        position_ids = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        position_embeddings = self.rotary_emb(h, position_ids=position_ids)
        for layer in self.layers:
            h = layer(h, attention_mask=None, position_ids=position_ids, position_embeddings=position_embeddings)
        if self.lm_head is not None:
            h = self.lm_head(self.norm(h))
        return h


def loss_fn(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def main():
    model_dir, schedule_name = sys.argv[1], sys.argv[2]
    microbatches = int(sys.argv[3])
    splits = [int(x) for x in sys.argv[4].split(",")]
    vocab, batch, seq, warmup, steps = map(int, sys.argv[5:10])
    lr = float(sys.argv[10])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM
    import transformers.models.llama.modeling_llama  # noqa: F401  (AutoModel's lazy import, before the timing)

    single = schedule_name == "single"
    if not single:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
        dist.init_process_group("gloo")
    rank, world = (0, 1) if single else (dist.get_rank(), dist.get_world_size())
    if not single and world != 2:
        sys.exit(f"two processes: {world}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    parameters = sum(p.numel() for p in model.parameters())
    layers = model.config.num_hidden_layers
    if not single:
        bounds = [0, *splits, layers]
        count = len(bounds) - 1
        mine = list(range(rank, count, world))
        model = nn.ModuleList(Stage(model, bounds[s], bounds[s + 1], s == 0, s == count - 1) for s in mine)
    model.train()
    fused = os.environ.get("BENCH_ADAMW", "fused") == "fused"
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, fused=fused or None)
    local = sum(p.numel() for p in model.parameters())
    if not single:
        stages = [PipelineStage(m, stage_index=s, num_stages=count, device=torch.device("cpu"))
                  for m, s in zip(model, mine)]
        kind = get_schedule_class(schedule_name)
        single_stage = issubclass(kind, PipelineScheduleSingle)
        schedule = kind(stages[0] if single_stage else stages, n_microbatches=microbatches, loss_fn=loss_fn)

    x = tokens(0, batch, seq, vocab)
    labels = F.pad(x, (0, 1), value=-100)[:, 1:]  # transformers' shift: token t predicts t + 1
    losses, phase, t0 = [], {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}, 0.0
    for step in range(warmup + steps):
        if step == warmup:
            if not single:
                dist.barrier()
            t0 = time.perf_counter()
            phase = dict.fromkeys(phase, 0.0)
        t1 = time.perf_counter()
        if single:
            loss = loss_fn(model(input_ids=x).logits, labels)
            t2 = time.perf_counter()
            loss.backward()
            value = loss.item()
        else:
            mb_losses = []
            if rank == 0:
                schedule.step(x, return_outputs=False)
            else:
                schedule.step(target=labels, losses=mb_losses, return_outputs=False)
            t2 = time.perf_counter()
            mean = torch.stack(mb_losses).mean().detach().reshape(1) if mb_losses else torch.zeros(1)
            dist.broadcast(mean, src=world - 1)
            value = mean.item()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t4 = time.perf_counter()
        losses.append(value)
        for k, dt in zip(phase, (t2 - t1, t3 - t2, t4 - t3)):
            phase[k] += dt
    if not single:
        dist.barrier()
    seconds = time.perf_counter() - t0
    result = {"impl": "pytorch", "rank": rank, "world": world, "schedule": schedule_name,
              "microbatches": microbatches, "parameters": parameters, "local_parameters": local,
              "tokens_per_s": round(steps * batch * seq / seconds, 3), "step_ms": round(1e3 * seconds / steps, 3),
              "peak_rss_mb": round(status_mb("VmHWM"), 1),
              "phase_ms": {k: round(1e3 * v / steps, 3) for k, v in phase.items()}, "losses": losses}
    with open(os.path.join(os.environ["BENCH_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if not single:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
