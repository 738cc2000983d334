"""peft + Accelerate side of bench/lora.py, MODE among:

  save-adapter MODEL_DIR ADAPTER_DIR R ALPHA
      one process: get_peft_model(AutoModelForCausalLM.from_pretrained(MODEL_DIR), LoraConfig(r=R,
      lora_alpha=ALPHA, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")) with
      torch.manual_seed(0), then every lora_B set to normal(0, 0.01) from a generator seeded 1 (peft's
      lora_B is zero: made non-zero so that the first step's loss and both factors' gradients depend on the
      adapter), then save_pretrained(ADAPTER_DIR): the initial adapter both sides start from.
  lora MODEL_DIR ADAPTER_DIR VOCAB BATCH SEQ WARMUP STEPS LR
      started by `accelerate launch` (2 processes: --multi_gpu, which is torchrun, for DDP, with
      Accelerator(cpu=True) that is Accelerate's MULTI_CPU over Gloo; an FSDP config file for FSDP2, which
      Accelerate 1.15 takes on accelerators only: its state is set to FSDP here so that its own FSDP2
      preparation runs on CPU): PeftModel.from_pretrained(base, ADAPTER_DIR, is_trainable=True),
      torch.optim.AdamW(lr=LR, weight_decay=0.01, its other defaults: the per-tensor loop on CPU) over the
      trainable parameters, Accelerator.prepare(model, optimizer), then lora_step.c's steps:
      model(input_ids=x, labels=x).loss, accelerator.backward, step, zero_grad.

  full MODEL_DIR ADAPTER_DIR VOCAB BATCH SEQ WARMUP STEPS LR
      the same without an adapter: every parameter trained (ADAPTER_DIR is not read).

BENCH_FUSED_ADAMW=1 makes the AdamW fused. BENCH_DEVICE=cuda (bench/gpu.py) runs on the accelerator instead of Accelerator(cpu=True), in the precision
Accelerate reads from ACCELERATE_MIXED_PRECISION, and adds the peak CUDA memory (max_memory_allocated) to the
result. Tokens, timing and the result file (BENCH_OUT/rank<R>.json) are lora_step.c's."""
import json
import os
import sys
import time

import numpy as np
import torch


def status_mb(key):
    """A line of /proc/self/status in MB ("VmHWM", "VmRSS")."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return -1.0


def mix(h):
    """step.h's 32-bit hash, on a uint32 array."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x7FEB352D)
    h = h ^ (h >> np.uint32(15))
    h = h * np.uint32(0x846CA68B)
    return h ^ (h >> np.uint32(16))


def tokens(rank, batch, seq, vocab):
    """lora_step.c's: token i is mix(i) % vocab, from rank * n on (the rank's batch, the same at every step)."""
    n = batch * seq
    base = (rank * n) % 2**32
    i = ((np.arange(n, dtype=np.uint64) + base) % 2**32).astype(np.uint32)
    return torch.from_numpy((mix(i) % np.uint32(vocab)).astype(np.int64)).view(batch, seq)


def lora_config(r, alpha):
    from peft import LoraConfig
    return LoraConfig(r=r, lora_alpha=alpha, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")


def save_adapter(model_dir, adapter_dir, r, alpha):
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), lora_config(r, alpha))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)
    model.save_pretrained(adapter_dir)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(json.dumps({"trainable": trainable, "all": sum(p.numel() for p in model.parameters())}))


def train(mode, model_dir, adapter_dir, vocab, batch, seq, warmup, steps, lr):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from accelerate import Accelerator
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    import transformers.models.llama.modeling_llama  # noqa: F401  (AutoModel's lazy import)
    on_cuda = os.environ.get("BENCH_DEVICE", "cpu") == "cuda"
    accelerator = Accelerator(cpu=not on_cuda)
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and accelerator.distributed_type == "MULTI_CPU":
        # Accelerate 1.15 takes an FSDP config on accelerators only (AcceleratorState turns MULTI_GPU and its kin
        # into FSDP, never MULTI_CPU); its FSDP2 preparation (fsdp2_prepare_model: fully_shard on every
        # LlamaDecoderLayer, then the root) runs on CPU over Gloo when the state says FSDP.
        from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
        accelerator.state.distributed_type = DistributedType.FSDP
        accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin()
    rank, world = accelerator.process_index, accelerator.num_processes
    rss_before = status_mb("VmRSS")
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    base_parameters = sum(p.numel() for p in base.parameters())
    model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=True) if mode == "lora" else base
    parameters = sum(p.numel() for p in model.parameters())
    model.train()
    # BENCH_FUSED_ADAMW=1: PyTorch's fused AdamW (one kernel per step on CUDA), the careful user's choice.
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01,
                            fused=os.environ.get("BENCH_FUSED_ADAMW") == "1" or None)
    rss_loaded = status_mb("VmRSS")
    model, opt = accelerator.prepare(model, opt)
    rss_prepared, hwm_prepared, hwm_first_step = status_mb("VmRSS"), status_mb("VmHWM"), 0.0
    # What this rank holds after prepare (FSDP2: DTensor shards), to check that the model is sharded.
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    losses, phase = [], {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    t0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            accelerator.wait_for_everyone()
            t0 = time.perf_counter()
            phase = dict.fromkeys(phase, 0.0)
        x = tokens(rank, batch, seq, vocab).to(accelerator.device)
        t1 = time.perf_counter()
        loss = model(input_ids=x, labels=x).loss
        t2 = time.perf_counter()
        accelerator.backward(loss)
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t4 = time.perf_counter()
        losses.append(loss.item())
        if step == 0:
            hwm_first_step = status_mb("VmHWM")
        for k, dt in zip(phase, (t2 - t1, t3 - t2, t4 - t3)):
            phase[k] += dt
    accelerator.wait_for_everyone()
    seconds = time.perf_counter() - t0
    result = {"impl": "peft" if mode == "lora" else "accelerate", "mode": mode, "rank": rank, "world": world, "base_parameters": base_parameters,
              "parameters": parameters, "local_parameters": local,
              "tokens_per_s": round(steps * batch * seq * world / seconds, 3),
              "step_ms": round(1e3 * seconds / steps, 3), "peak_rss_mb": round(status_mb("VmHWM"), 1),
              "rss_before_load_mb": round(rss_before, 1), "rss_loaded_mb": round(rss_loaded, 1),
              "rss_prepared_mb": round(rss_prepared, 1), "peak_rss_prepared_mb": round(hwm_prepared, 1),
              "peak_rss_first_step_mb": round(hwm_first_step, 1),
              "phase_ms": {k: round(1e3 * v / steps, 3) for k, v in phase.items()}, "losses": losses}
    if on_cuda:
        result["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    with open(os.path.join(os.environ["BENCH_OUT"], f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    accelerator.end_training()


def main():
    mode = sys.argv[1]
    if mode == "save-adapter":
        return save_adapter(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    if mode not in ("lora", "full"):
        sys.exit(f"unknown mode '{mode}' (save-adapter, lora or full)")
    vocab, batch, seq, warmup, steps = map(int, sys.argv[4:9])
    train(mode, sys.argv[2], sys.argv[3], vocab, batch, seq, warmup, steps, float(sys.argv[9]))


if __name__ == "__main__":
    main()
