"""Reference side of bench/hf.py, one process per call, MODE among:

  save DIR CONFIG_JSON            builds LlamaForCausalLM(LlamaConfig(**CONFIG)) with random weights (seed 0,
                                  float32) and writes it with save_pretrained(DIR) (model.safetensors)
  transformers DIR DROP ARGS...   AutoModelForCausalLM.from_pretrained(DIR) (first call of the process, a warm
                                  one and, when DROP is 1, a cold one after dropping the page cache), then
                                  greedy generate, eval forward under torch.no_grad (and, for comparison with
                                  libacc's forward, the same with autograd on) and training steps, all eager
  compile DIR DROP ARGS...        from_pretrained once, then the forward and the training steps through
                                  torch.compile(model) (mode default); the first call of each is the compile,
                                  reported apart, then WARMUP untimed calls, then the timed ones
  accelerate DIR DROP             Accelerate's big-model loading: AutoConfig.from_pretrained, from_config under
                                  init_empty_weights, load_checkpoint_and_dispatch(model, DIR,
                                  device_map={"": "cpu"}); load times only

ARGS are hf_step.c's after DROP: VOCAB BATCH SEQ WARMUP FWD_STEPS TRAIN_STEPS GEN_PROMPT GEN_NEW GEN_REPS LR.
Tokens and steps are hf_step.c's; prints one JSON line with the same keys."""
import copy
import json
import os
import resource
import subprocess
import sys
import time

import torch


def mix(h):
    """hf_step.c's 32-bit hash."""
    h ^= h >> 16
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x846CA68B) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def tokens(rows, cols, first, vocab):
    return torch.tensor([mix((first + i) & 0xFFFFFFFF) % vocab for i in range(rows * cols)],
                        dtype=torch.int64).view(rows, cols)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed_loads(load, drop):
    """First call, warm call, cold call (after dropping the page cache): seconds each, and the last model."""
    out = {}
    model = None
    for key in ("load_first_s", "load_warm_s", "load_cold_s"):
        if key == "load_cold_s":
            if not drop:
                out[key] = -1.0
                break
            drop_caches()
        model = None
        t = time.perf_counter()
        model = load()
        out[key] = round(time.perf_counter() - t, 4)
    return out, model


def save(d, config_json):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**json.loads(config_json)))
    model.save_pretrained(d)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))


def main():
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "save":
        return save(d, sys.argv[3])
    drop = int(sys.argv[3])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    # The libraries and the model's module imported before any timing: only the load is timed.
    from transformers import AutoConfig, AutoModelForCausalLM
    import transformers.models.llama.modeling_llama  # noqa: F401  (AutoModel's lazy import)
    result = {"impl": mode}
    if mode == "accelerate":
        from accelerate import init_empty_weights, load_checkpoint_and_dispatch

        def load():
            config = AutoConfig.from_pretrained(d)
            with init_empty_weights():
                model = AutoModelForCausalLM.from_config(config)
            return load_checkpoint_and_dispatch(model, d, device_map={"": "cpu"})

        loads, model = timed_loads(load, drop)
        result.update(loads, parameters=sum(p.numel() for p in model.parameters()))
        print(json.dumps(result))
        return

    vocab, batch, seq, warmup, fwd_steps, train_steps, prompt_len, gen_new, gen_reps = map(int, sys.argv[4:13])
    lr = float(sys.argv[13])
    loads, model = timed_loads(lambda: AutoModelForCausalLM.from_pretrained(d), drop)
    if mode == "transformers":
        result.update(loads)
    result["parameters"] = sum(p.numel() for p in model.parameters())
    model.eval()
    x = tokens(batch, seq, 0, vocab)

    if mode == "transformers":
        # Greedy, batch 1, exactly gen_new tokens: no stop token (libacc: "eos_token_id": []). min_new_tokens
        # would instead mask the eos logit, which changes greedy choices; with no eos it is moot.
        prompt = tokens(1, prompt_len, 1000000, vocab)
        gc = copy.deepcopy(model.generation_config)
        gc.eos_token_id = None
        gc.do_sample = False
        gc.max_new_tokens = gen_new
        gc.min_new_tokens = gen_new
        gen_s = 0.0
        for i in range(warmup + gen_reps):
            t = time.perf_counter()
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=gc)
            if i >= warmup:
                gen_s += time.perf_counter() - t
        new = out[0, prompt_len:].tolist()
        result.update(generate_s=round(gen_s, 4), generate_tokens_per_s=round(len(new) * gen_reps / gen_s, 2),
                      generated=new)

    def run_steps(step, steps, compiled):
        """(compile seconds: the first call, when compiled), then warmup untimed calls, then steps timed ones."""
        compile_s = None
        if compiled:
            t = time.perf_counter()
            step(0)
            compile_s = round(time.perf_counter() - t, 4)
        total = 0.0
        for i in range(warmup + steps):
            t = time.perf_counter()
            step(i)
            if i >= warmup:
                total += time.perf_counter() - t
        return compile_s, total

    compiled = mode == "compile"
    fwd = torch.compile(model) if compiled else model
    n = batch * seq

    def forward(_):
        with torch.no_grad():
            fwd(input_ids=x).logits

    compile_s, fwd_s = run_steps(forward, fwd_steps, compiled)
    result.update(forward_s=round(fwd_s, 4), forward_tokens_per_s=round(n * fwd_steps / fwd_s, 2))
    if compiled:
        result["forward_compile_s"] = compile_s
    else:
        # libacc's acc_model_forward has no no-grad switch: the same eval forward with autograd on.
        _, grad_s = run_steps(lambda _: fwd(input_ids=x).logits, fwd_steps, False)
        result.update(forward_grad_s=round(grad_s, 4), forward_grad_tokens_per_s=round(n * fwd_steps / grad_s, 2))

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []

    def train(_):
        loss = fwd(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())

    compile_s, train_s = run_steps(train, train_steps, compiled)
    result.update(train_s=round(train_s, 4), train_tokens_per_s=round(n * train_steps / train_s, 2),
                  first_loss=round(losses[0], 6), last_loss=round(losses[-1], 6))
    if compiled:
        result["train_compile_s"] = compile_s
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
