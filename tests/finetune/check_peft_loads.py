#!/usr/bin/env python3
"""peft loads the adapters libacc saved, and transformers the models libacc merged, with the logits libacc computed.

tests/cpp/test_lora (Peft/Case.AdapterForPeft), run with ACC_LORA_SAVED=DIR, leaves one directory per fixture case
under DIR: adapter_config.json and adapter_model.safetensors written by libacc's save_adapter (an adapter made by
add_lora from the case's LoraConfig arguments, its trained tensors moved as make_fixtures.py moved peft's), and
libacc_outputs.safetensors with the inputs and libacc's logits (metadata: the base model's directory); merged/ holds
the model after acc's merge_adapter, saved with save_pretrained, and its logits. This script loads each adapter with
peft's PeftModel.from_pretrained onto the transformers base model, and each merged model with transformers'
from_pretrained, and compares the logits, where attention_mask is 1, within 1e-5.

Needs the Python environment of bench/setup.sh (torch, transformers, peft); CI has none, so the meson test
'lora-peft' runs this only where .venv-bench has them and is skipped (77) elsewhere.
  check_peft_loads.py TEST_LORA_BINARY SOURCE_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import peft
    import torch
    import transformers
    from safetensors import safe_open
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e} (run bench/setup.sh for torch, transformers and peft)")
    sys.exit(77)


def main():
    binary, root = sys.argv[1:3]
    worst, failed, passed = 0.0, 0, 0
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, ACC_LORA_SAVED=d)
        p = subprocess.run([binary, root, "--gtest_filter=*AdapterForPeft*"], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"test_lora failed:\n{p.stdout}{p.stderr}")
        for case in sorted(os.listdir(d)):
            path = os.path.join(d, case)
            outputs = os.path.join(path, "libacc_outputs.safetensors")
            with safe_open(outputs, "pt") as f:
                base_dir = f.metadata()["base_model_dir"]
            out = load_file(outputs)
            with open(os.path.join(path, "adapter_config.json")) as f:
                task = json.load(f)["task_type"]
            cls = (transformers.AutoModelForSequenceClassification if task == "SEQ_CLS"
                   else transformers.AutoModelForCausalLM)
            base = cls.from_pretrained(base_dir, attn_implementation="eager", dtype=torch.float32).eval()
            merged_path = os.path.join(path, "merged")
            merged_out = load_file(os.path.join(merged_path, "libacc_outputs.safetensors"))
            checks = [("peft loads libacc's adapter", peft.PeftModel.from_pretrained(base, path), out),
                      ("transformers loads libacc's merged model",
                       cls.from_pretrained(merged_path, attn_implementation="eager", dtype=torch.float32), merged_out)]
            for what, model, expected in checks:
                kwargs = {k: expected[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in expected}
                with torch.no_grad():
                    logits = model.eval()(**kwargs).logits
                diff = (logits - expected["logits"]).abs()
                if logits.dim() == 3:
                    diff = diff[expected["attention_mask"].bool()]
                d_max = diff.max().item()
                worst = max(worst, d_max)
                ok = d_max <= 1e-5
                failed += not ok
                passed += ok
                print(f"{case}: {what}; logits max |diff| {d_max:.3g} {'ok' if ok else 'FAILED'}")
    print(f"worst logits max |diff| {worst:.3g}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
