"""Make tests/hf/parity/<case>/: config.json values transformers reads in a way libacc once did not.

Each case is a tiny model whose config.json (written by hand, not save_pretrained's full dump) leaves out or sets the
keys under test, so that the configuration class's own defaults and the modeling code's reading of them decide the
result; transformers loads it back from the folder (as a user's checkpoint would be) and records its outputs:

  <case>/model/config.json, model.safetensors  the config below and random weights (bfloat16, to keep them small)
  <case>/expected.safetensors                  input_ids, attention_mask (uint8; no mask: all ones; the labels
                                               are input_ids with -100 where the mask is 0); transformers' float32 "loss" and
                                               "logits" of the last LAST positions; "embed_grad", the token
                                               embedding's gradient of that loss (training mode: no dropout here)

Cases:
  mistral_window   no sliding_window: MistralConfig's 4096 (a sequence of 4100 tokens); attention_bias and mlp_bias
                   true, which MistralForCausalLM does not read
  mixtral_defaults no num_key_value_heads (8), rms_norm_eps (1e-5), rope_theta (MixtralConfig.default_theta 1e6),
                   num_local_experts (8), num_experts_per_tok (2); attention_bias true (not read)
  qwen2_mixed      use_sliding_window with max_window_layers 1: layer 0 full attention, layer 1 a window of 3
  qwen2_types      layer_types given: layer 0 sliding, layer 1 full
  qwen2_full       use_sliding_window without max_window_layers: Qwen2Config's 28, so both layers full attention

Each case also checks that the keys matter: read as each of its alternatives (CASES), the last logits move by more
than 1e-3.

    .venv-bench/bin/python tests/hf/make_parity.py

Deterministic, on the CPU, a few seconds; CI never runs it (tests/cpp/test_hf reads its outputs).
"""

import json
import pathlib
import shutil

import safetensors.torch
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent / "parity"
LAST = 4
VOCAB = 32

COMMON = {"vocab_size": VOCAB, "num_hidden_layers": 1, "initializer_range": 0.5, "tie_word_embeddings": True}

CASES = {
    "mistral_window": ({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 8,
                        "intermediate_size": 8, "num_attention_heads": 1, "num_key_value_heads": 1,
                        "attention_bias": True, "mlp_bias": True},
                       [{"sliding_window": None}], 4100),
    # head_dim 4: rotary frequencies that rope_theta changes; untied, the embedding scaled to a variance near
    # rms_norm_eps (EMBED_SCALE) so that the epsilon shows.
    "mixtral_defaults": ({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 16,
                          "intermediate_size": 4, "num_attention_heads": 8, "head_dim": 4, "attention_bias": True,
                          "tie_word_embeddings": False},
                         [{"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, {"rms_norm_eps": 1e-6}, {"num_experts_per_tok": 1}], 8),
    "qwen2_mixed": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
                     "intermediate_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
                     "num_hidden_layers": 2, "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1},
                    [{"layer_types": ["sliding_attention", "sliding_attention"]}, {"layer_types": ["full_attention", "full_attention"]}], 8),
    "qwen2_types": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
                     "intermediate_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
                     "num_hidden_layers": 2, "use_sliding_window": True, "sliding_window": 3,
                     "layer_types": ["sliding_attention", "full_attention"]},
                    [{"layer_types": ["sliding_attention", "sliding_attention"]},
                     {"layer_types": ["full_attention", "full_attention"]}], 8),
    "qwen2_full": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
                    "intermediate_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2,
                    "num_hidden_layers": 2, "use_sliding_window": True, "sliding_window": 3},
                   [{"layer_types": ["sliding_attention", "sliding_attention"]}], 8),
}
EMBED_SCALE = {"mixtral_defaults": 0.006}
# What Qwen2Config makes of the cases' keys (an alternative above sets layer_types after the config is built).
LAYER_TYPES = {"qwen2_mixed": ["full_attention", "sliding_attention"], "qwen2_full": ["full_attention"] * 2}


def run(folder, overrides, ids, mask, labels):
    """transformers' loss, last logits and embedding gradient of the checkpoint in `folder`, `overrides` applied."""
    config = transformers.AutoConfig.from_pretrained(folder, **overrides)
    cls = getattr(transformers, config.architectures[0])
    model = cls.from_pretrained(folder, config=config, dtype=torch.float32, attn_implementation="sdpa")
    model.train()  # the configs' dropout is 0: training mode changes nothing but must not in libacc either
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    grad = model.get_input_embeddings().weight.grad
    return out.loss.detach(), out.logits[:, -LAST:].detach().contiguous(), grad.contiguous()


def main():
    shutil.rmtree(ROOT, ignore_errors=True)
    for i, (case, (config, changed, length)) in enumerate(CASES.items()):
        config = {**COMMON, **config}
        folder = ROOT / case / "model"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        torch.manual_seed(1000 + i)
        read = transformers.AutoConfig.from_pretrained(folder)
        assert case not in LAYER_TYPES or read.layer_types == LAYER_TYPES[case], (case, read.layer_types)
        built = getattr(transformers, config["architectures"][0])(read)
        with torch.no_grad():
            built.get_input_embeddings().weight.mul_(EMBED_SCALE.get(case, 1.0))
        built.to(torch.bfloat16).save_pretrained(folder)
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")  # without save_pretrained's defaults
        gen = torch.Generator().manual_seed(i)
        long = length > 100  # one row, unpadded: the file stays small
        ids = torch.randint(0, VOCAB, (1 if long else 2, length), generator=gen)
        mask = torch.ones_like(ids)
        if not long:
            mask[1, -2:] = 0  # a padded row
        labels = ids.masked_fill(mask == 0, -100)
        loss, logits, grad = run(folder, {}, ids, mask, labels)
        moves = []
        for other in changed:
            moved = (logits - run(folder, other, ids, mask, labels)[1]).abs().max().item()
            assert moved > 1e-3, f"{case}: reading {other} instead moves the last logits only {moved:.3g}"
            moves.append(f"{other}: {moved:.3g}")
        inputs = {"input_ids": ids.to(torch.uint8)}
        if not long:
            inputs["attention_mask"] = mask.to(torch.uint8)
        safetensors.torch.save_file(
            {**inputs, "loss": loss, "logits": logits, "embed_grad": grad},
            str(ROOT / case / "expected.safetensors"), metadata={"case": case})
        size = sum(f.stat().st_size for f in (ROOT / case).rglob("*") if f.is_file())
        print(f"{case}: loss {loss.item():.6f}; the last logits move by {', '.join(moves)}; {size} bytes")


if __name__ == "__main__":
    main()
