"""PyTorch side of bench/tp.py: tensor parallelism (and TP x FSDP2) on a Hugging Face LlamaForCausalLM with torch's
own API, started by `acc launch` (which sets torchrun's environment), one process per rank over Gloo.

  tp_step.py MODEL_DIR DP_SHARD TP VOCAB BATCH SEQ WARMUP STEPS LR

The mesh is init_device_mesh("cpu", (DP_SHARD, TP), ("dp_shard", "tp")), laid out as Accelerate and libacc lay it
(tp innermost). The model (AutoModelForCausalLM.from_pretrained, float32) is split over "tp" by
parallelize_module with transformers' Llama plan for the decoder layers (base_model_tp_plan: q/k/v/gate/up
ColwiseParallel, o/down RowwiseParallel) and, as torchtitan and libacc do, the token embedding vocabulary-parallel
(RowwiseParallel with a replicated input) and the head vocabulary-parallel with its logits left sharded
(ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)) for loss_parallel: the cross entropy without
gathering the logits. With DP_SHARD > 1, fully_shard over "dp_shard" on every decoder layer, then on the root
(torchtitan's 2-D). AdamW (lr LR, weight_decay 0.01, torch's defaults otherwise: for-each) over the parameters.

Each step: the dp rank's batch (tp_step.cpp's tokens: token i is mix(i) % VOCAB from dp_rank * BATCH * SEQ on, the
same at every step so that the loss falls; the labels are the tokens shifted by one, -100 at the end, as
transformers shifts them), forward to the logits, the loss and backward under loss_parallel(), step, zero_grad.
WARMUP untimed steps, then STEPS timed between barriers. Every rank writes BENCH_OUT/rank<R>.json (tp_step.cpp's
keys): tokens/s of the job (each dp rank's tokens once), ms per phase (rank's own), peak resident memory (VmHWM),
resident memory before the load and after the preparation, its loss at every step, its local parameter count."""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

from lora_step import status_mb, tokens  # step.h's tokens and /proc/self/status, as the LoRA bench reads them


def tp_plan():
    """transformers' LlamaConfig.base_model_tp_plan for the layers, under "model.", torchtitan's for the embedding
    and the head."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    from transformers import LlamaConfig
    plan = {"model." + k: styles[v]() for k, v in LlamaConfig.base_model_tp_plan.items()}
    plan["model.embed_tokens"] = RowwiseParallel(input_layouts=Replicate())
    plan["lm_head"] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
    return plan


def main():
    model_dir = sys.argv[1]
    dp_shard, tp, vocab, batch, seq, warmup, steps = map(int, sys.argv[2:9])
    lr = float(sys.argv[9])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module
    from transformers import AutoModelForCausalLM
    import transformers.models.llama.modeling_llama  # noqa: F401  (AutoModel's lazy import, before the timing)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if dp_shard * tp != world:
        sys.exit(f"DP_SHARD {dp_shard} x TP {tp} is not the {world} processes")
    mesh = init_device_mesh("cpu", (dp_shard, tp), mesh_dim_names=("dp_shard", "tp"))
    dp_rank = mesh["dp_shard"].get_local_rank()
    rss_before = status_mb("VmRSS")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    parameters = sum(p.numel() for p in model.parameters())
    model.train()
    parallelize_module(model, mesh["tp"], tp_plan())
    if dp_shard > 1:
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["dp_shard"])
        fully_shard(model, mesh=mesh["dp_shard"])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    rss_prepared = status_mb("VmRSS")

    x = tokens(dp_rank, batch, seq, vocab)
    labels = F.pad(x, (0, 1), value=-100)[:, 1:]  # transformers' shift: token t predicts t + 1
    losses, phase, t0 = [], {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}, 0.0
    for step in range(warmup + steps):
        if step == warmup:
            dist.barrier()
            t0 = time.perf_counter()
            phase = dict.fromkeys(phase, 0.0)
        t1 = time.perf_counter()
        with loss_parallel():
            logits = model(input_ids=x).logits  # a DTensor: each rank its vocabulary slice
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
            t2 = time.perf_counter()
            loss.backward()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t4 = time.perf_counter()
        losses.append(loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item())
        del logits, loss
        for k, dt in zip(phase, (t2 - t1, t3 - t2, t4 - t3)):
            phase[k] += dt
    dist.barrier()
    seconds = time.perf_counter() - t0
    result = {"impl": "pytorch", "rank": rank, "world": world, "dp_shard": dp_shard, "tp": tp,
              "parameters": parameters, "local_parameters": local,
              "tokens_per_s": round(steps * batch * seq * dp_shard / seconds, 3),
              "step_ms": round(1e3 * seconds / steps, 3), "peak_rss_mb": round(status_mb("VmHWM"), 1),
              "rss_before_load_mb": round(rss_before, 1), "rss_prepared_mb": round(rss_prepared, 1),
              "phase_ms": {k: round(1e3 * v / steps, 3) for k, v in phase.items()}, "losses": losses}
    with open(os.path.join(os.environ["BENCH_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
