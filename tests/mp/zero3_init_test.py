#!/usr/bin/env python3
"""DeepSpeed ZeRO-3's zero3_init_flag on 2 processes started by `acc launch` with an Accelerate config file
(tests/mp/mp_zero3_init.c drives each run):

- the weights after training equal the flag-off run's bit for bit: from acc_model_from_config (the same draws from the
  same generator), with a LoRA adapter, and from acc_model_from_pretrained of the sharded llama fixture; unset, the
  flag is on under ZeRO-3 (Accelerate's default);
- no process ever holds the whole model: a 41M-parameter Llama's peak resident memory grows by less than 0.75 of its
  size from before it is made until it is prepared with the flag, by more than 0.9 of it without (the measure sees
  it); through a step it grows further by the shards' gradients (ZeRO-3's own memory, reported);
- from_pretrained with the flag gives the logits without it, bit for bit, and transformers' (llama, tied gpt2);
- the flag beside ZeRO-2 is ignored with Accelerate's warning, not silently.

Usage: zero3_init_test.py ACC WORKER FIXTURES   (FIXTURES: tests/hf/fixtures)
"""
import json
import os
import re
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_f32 import max_abs_diff, read_safetensors  # noqa: E402
from checks import expect, finish  # noqa: E402
import mp_test  # noqa: E402  (its launch(): this script's arguments start with ACC and WORKER as mp_test.py's do)

FIXTURES = sys.argv[3]


def launch(flag, *args, stage=3, env_extra=None):
    """The worker on 2 processes under DeepSpeed ZeRO-`stage` with zero3_init_flag `flag` ("true", "false", or None:
    not in the file). Returns the finished process."""
    config = f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: {stage}\n"
    if flag is not None:
        config += f"  zero3_init_flag: {flag}\n"
    p, _ = mp_test.launch(2, *args, config=config, env_extra=env_extra)
    expect(p.returncode == 0, f"zero3_init_flag {flag}, stage {stage}: {args}", p.stdout + p.stderr)
    return p


def trained(d, flag, model, steps, env_extra=None, stage=3):
    out = os.path.join(d, f"{flag}-{stage}-{os.path.basename(model)}-{steps}-{len(env_extra or {})}")
    env = dict(env_extra or {})
    if flag != "false" and stage == 3:
        env["MP_DEFERRED"] = "1"  # the worker checks the model waits for prepare
    p = launch(flag, "train", model, steps, out, stage=stage, env_extra=env)
    return (read_safetensors(os.path.join(out, "model.safetensors")) if p.returncode == 0 else None), p


def f32_tensor(path, name):
    """One float32 tensor of a safetensors file (the fixtures' expected.safetensors also holds int64 ones)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    e = header[name]
    assert e["dtype"] == "F32", e
    begin, end = e["data_offsets"]
    return struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])


def main():
    llama_dir = os.path.join(FIXTURES, "llama", "model")
    with tempfile.TemporaryDirectory() as d:
        # (a) Training from the flag's model equals training from the whole model.
        lora = json.dumps({"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]})
        for label, model, env in (("from_config", "config", None),
                                  ("from_config with LoRA", "config", {"MP_LORA": lora}),
                                  ("from_pretrained (sharded fixture)", llama_dir, None)):
            start, _ = trained(d, "false", model, 0, env)
            off, _ = trained(d, "false", model, 10, env)
            on, _ = trained(d, "true", model, 10, env)
            if None in (start, off, on):
                continue
            moved = max_abs_diff(start, off)
            diff = max_abs_diff(off, on)
            print(f"{label}: zero3_init_flag on vs off after 10 AdamW steps: max |diff| = {diff:.3g} "
                  f"(training moved the weights by up to {moved:.3g})")
            expect(moved > 1e-3, f"{label}: training changed the weights", moved)
            expect(diff == 0, f"{label}: the flag trains as without it, bit for bit", diff)
        # Unset under ZeRO-3 the flag is on (DeepSpeedPlugin's default: is_zero3()); the worker checks the model waits.
        unset, _ = trained(d, None, "config", 10)
        off, _ = trained(d, "false", "config", 10)
        if unset is not None and off is not None:
            expect(max_abs_diff(unset, off) == 0, "zero3_init_flag unset trains as off", max_abs_diff(unset, off))

        # (b) No process holds the whole model: peak resident memory against the model's size. Resident memory is
        # made to follow live memory: meson's MALLOC_PERTURB_ would fill (and so make resident) buffers that are
        # allocated and never written (the flat buffers a sharded unit is gathered into), and a fixed mmap threshold
        # gives freed blocks back to the system instead of keeping them in glibc's heap.
        measured = {"MALLOC_PERTURB_": None, "MALLOC_MMAP_THRESHOLD_": "65536"}
        big = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
                          "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 12,
                          "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 16,
                          "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
                          "initializer_range": 0.02, "tie_word_embeddings": False})
        grown = {}
        for flag in ("true", "false"):
            env = dict(measured, **({"MP_DEFERRED": "1"} if flag == "true" else {}))
            p = launch(flag, "memory", big, env_extra=env)
            rows = re.findall(r"MEMORY rank=(\d) model_bytes=(\d+) before=(\d+) prepared=(\d+) stepped=(\d+)", p.stdout)
            expect(len(rows) == 2, f"flag {flag}: both processes report their memory", p.stdout + p.stderr)
            for rank, size, before, prepared, stepped in rows:
                size, before, prepared, stepped = int(size), int(before), int(prepared), int(stepped)
                grown[flag, rank] = ((prepared - before) / size, (stepped - before) / size)
                mib = 2**20
                print(f"zero3_init_flag {flag}, rank {rank}: model {size / mib:.0f} MiB; peak resident memory grew "
                      f"by {(prepared - before) / mib:.0f} MiB up to prepare ({(prepared - before) / size:.2f} of "
                      f"the model), {(stepped - before) / mib:.0f} MiB through a step "
                      f"({(stepped - before) / size:.2f})")
        for rank in ("0", "1"):
            if ("true", rank) in grown and ("false", rank) in grown:
                on, off = grown["true", rank], grown["false", rank]
                expect(off[0] > 0.9, f"rank {rank}: without the flag the whole model is resident (the measure sees it)",
                       off)
                # Its shards (half the model) and one module's temporaries; a step then adds the shards' gradients
                # (ZeRO-3's own memory, the same with or without the flag: not bounded here).
                expect(on[0] < 0.75, f"rank {rank}: with the flag, up to prepare, no more than its shards and one "
                       "module are ever resident", on)

        # (c) from_pretrained with the flag: the logits without it, and transformers'.
        for case in ("llama", "gpt2"):
            logits = {}
            for flag in ("true", "false"):
                out = os.path.join(d, f"logits-{case}-{flag}")
                p = launch(flag, "logits", os.path.join(FIXTURES, case, "model"), out,
                           env_extra={"MP_DEFERRED": "1"} if flag == "true" else None)
                if p.returncode == 0:
                    with open(out, "rb") as f:
                        raw = f.read()
                    logits[flag] = struct.unpack(f"<{len(raw) // 4}f", raw)
            if len(logits) != 2:
                continue
            expect(logits["true"] == logits["false"], f"{case}: the flag's logits are the whole model's, bit for bit")
            want = f32_tensor(os.path.join(FIXTURES, case, "expected.safetensors"), "logits")
            vocab = len(want) // 14
            real = [i for i in range(len(want)) if (i // vocab) not in (12, 13)]  # row 1's two padded positions
            worst = max(abs(logits["true"][i] - want[i]) for i in real)
            print(f"{case}: from_pretrained with zero3_init_flag vs transformers' logits: max |diff| = {worst:.3g}")
            expect(worst <= 1e-5, f"{case}: the flag's logits are transformers'", worst)

        # The flag beside ZeRO-2: ignored (the model is made whole at once), with Accelerate's warning.
        zero2, p = trained(d, "true", "config", 2, stage=2)
        expect("zero3_init_flag' = true" in p.stderr and "only applicable for DeepSpeed ZeRO stage 3" in p.stderr,
               "zero3_init_flag beside ZeRO-2 is reported", p.stderr)

    finish()


main()
