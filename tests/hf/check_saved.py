#!/usr/bin/env python3
"""transformers loads what libacc's save_pretrained wrote, with the logits libacc computed.

tests/cpp/test_hf (FromPretrained.SavePretrainedLoadsBackWithTheSameLogits), run with ACC_HF_SAVED=DIR, leaves one
directory per architecture under DIR: config.json, (sharded) safetensors, and libacc_outputs.safetensors with the
inputs and libacc's logits of the changed model it saved. This script loads each with transformers'
AutoModelFor* .from_pretrained and compares its logits, where attention_mask is 1, within 1e-5.

Needs the Python environment of bench/setup.sh (torch and transformers); CI has none, so the meson test 'hf-saved'
runs this only where .venv-bench has transformers and is skipped (77) elsewhere.
  check_saved.py TEST_HF_BINARY FIXTURES_DIR
  check_saved.py --saved DIR...   directories written already, each with its libacc_outputs.safetensors (the
                                  save_pretrained of a model split by tensor parallelism: tests/mp/mesh_checkpoint_test.py)
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as e:
    print(f"skipped: {e} (run bench/setup.sh for torch and transformers)")
    sys.exit(77)


def main():
    with tempfile.TemporaryDirectory() as d:
        if sys.argv[1] == "--saved":
            paths = sys.argv[2:]
        else:
            binary, fixtures = sys.argv[1:3]
            env = dict(os.environ, ACC_HF_SAVED=d)
            p = subprocess.run([binary, fixtures, "--gtest_filter=*SavePretrained*"], env=env, capture_output=True,
                               text=True)
            if p.returncode != 0:
                sys.exit(f"test_hf failed:\n{p.stdout}{p.stderr}")
            paths = [os.path.join(d, name) for name in sorted(os.listdir(d))]
        check(paths)


def check(paths):
    worst = 0.0
    failed = 0
    for path in paths:
        name = os.path.basename(os.path.normpath(path))
        out = load_file(os.path.join(path, "libacc_outputs.safetensors"))
        cls = transformers.AutoModelForSequenceClassification if name == "bert" else transformers.AutoModelForCausalLM
        model = cls.from_pretrained(path, attn_implementation="eager", dtype=torch.float32).eval()
        kwargs = {k: out[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in out}
        with torch.no_grad():
            logits = model(**kwargs).logits
        diff = (logits - out["logits"]).abs()
        if logits.dim() == 3:
            diff = diff[out["attention_mask"].bool()]
        d_max = diff.max().item()
        worst = max(worst, d_max)
        ok = d_max <= 1e-5
        failed += not ok
        print(f"{name}: transformers {transformers.__version__} loads libacc's save_pretrained; logits max |diff| "
              f"{d_max:.3g} {'ok' if ok else 'FAILED'}")
    print(f"worst logits max |diff| {worst:.3g}")
    print(f"{0 if failed else 1} passed, {1 if failed else 0} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
