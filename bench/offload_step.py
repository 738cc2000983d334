"""Accelerate side of bench/offload.py, one process per call:

  plan DIR BUDGET                 Accelerate's own plan: the model built under init_empty_weights from
                                  DIR/config.json, tie_weights(), infer_auto_device_map(max_memory={"cpu": BUDGET},
                                  no_split_module_classes=["LlamaDecoderLayer"]); prints it, and the modules
                                  in it with no weight in the checkpoint (model.rotary_emb: a buffer it computes)
  memory DIR ARGS...              AutoConfig.from_pretrained + AutoModelForCausalLM.from_config under
                                  init_empty_weights, tie_weights(), load_checkpoint_and_dispatch(model, DIR,
                                  device_map={"": "cpu"}): every weight in memory
  disk DIR ARGS... MAP_FILE       the same with device_map = the map in MAP_FILE (libacc's plan, which
                                  bench/offload.py checks equals Accelerate's) and offload_folder = a new
                                  directory beside MAP_FILE, removed at the end: the "disk" layers are written
                                  there by Accelerate and read back by its hooks at each forward

ARGS are offload_step.c's after MODE: BUDGET VOCAB GEN_PROMPT GEN_NEW WARMUP GEN_REPS. After the load, greedy
model.generate of GEN_NEW tokens after the same GEN_PROMPT-token prompt as offload_step.c, batch 1, no stop
token (eos_token_id=None, min_new_tokens=max_new_tokens), WARMUP untimed calls then GEN_REPS timed ones.
Peak memory as offload_step.c: "5" written to /proc/self/clear_refs (VmHWM := VmRSS) and VmRSS read just before
the load (the libraries imported and torch started), VmHWM read after the load and after the generation.
Prints one JSON line with offload_step.c's keys."""
import copy
import json
import os
import shutil
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_step import tokens  # noqa: E402  (the same 32-bit hash as offload_step.c's)

NO_SPLIT = ["LlamaDecoderLayer"]


def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return -1


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def empty_model(d):
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(d)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    model.tie_weights()
    return model


def main():
    mode, d, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    # The libraries and the model's module imported before any measurement.
    from accelerate import infer_auto_device_map, load_checkpoint_and_dispatch
    import transformers.models.llama.modeling_llama  # noqa: F401  (AutoModel's lazy import)
    if mode == "plan":
        model = empty_model(d)
        m = infer_auto_device_map(model, max_memory={"cpu": budget}, no_split_module_classes=NO_SPLIT)
        print(json.dumps({"impl": "accelerate", "mode": "plan", "planned_map": m}))
        return
    vocab, prompt_len, gen_new, warmup, gen_reps = map(int, sys.argv[4:9])
    device_map, offload = {"": "cpu"}, None
    if mode == "disk":
        with open(sys.argv[9]) as f:
            device_map = json.load(f)
        offload = tempfile.mkdtemp(prefix="offload-", dir=os.path.dirname(os.path.abspath(sys.argv[9])))
    elif mode != "memory":
        sys.exit(f"MODE is plan, memory or disk, not {mode}")
    prompt = tokens(1, prompt_len, 1000000, vocab)

    try:
        reset_peak()
        base = status_bytes("VmRSS:")
        t = time.perf_counter()
        model = load_checkpoint_and_dispatch(empty_model(d), d, device_map=device_map, offload_folder=offload,
                                             no_split_module_classes=NO_SPLIT)
        load_s = time.perf_counter() - t
        load_peak = status_bytes("VmHWM:") - base
        model.eval()
        offload_mb = 0.0
        if offload:
            offload_mb = sum(os.path.getsize(os.path.join(offload, f)) for f in os.listdir(offload)) / 1e6

        gc = copy.deepcopy(model.generation_config)
        gc.eos_token_id = None
        gc.do_sample = False
        gc.max_new_tokens = gen_new
        gc.min_new_tokens = gen_new
        gen_s = first_gen_s = 0.0
        with torch.no_grad():
            for i in range(warmup + gen_reps):
                t = time.perf_counter()
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=gc)
                s = time.perf_counter() - t
                if i == 0:
                    first_gen_s = s
                if i >= warmup:
                    gen_s += s
        peak = status_bytes("VmHWM:") - base
        rss_after = status_bytes("VmRSS:") - base
    finally:
        if offload:
            shutil.rmtree(offload, ignore_errors=True)
    new = out[0, prompt_len:].tolist()
    print(json.dumps({
        "impl": "accelerate", "mode": mode, "parameters": sum(p.numel() for p in model.parameters()),
        "load_s": round(load_s, 4), "first_generate_s": round(first_gen_s, 4), "generate_s": round(gen_s, 4),
        "generate_tokens_per_s": round(len(new) * gen_reps / gen_s, 3), "base_rss_mb": round(base / 1e6, 1),
        "load_peak_rss_mb": round(load_peak / 1e6, 1), "peak_rss_mb": round(peak / 1e6, 1),
        "rss_after_mb": round(rss_after / 1e6, 1), "offload_folder_mb": round(offload_mb, 1),
        "device_map": device_map, "generated": new}))


if __name__ == "__main__":
    main()
