"""Make the Hugging Face reference fixtures under tests/hf/fixtures/.

For each case (tiny llama / llama_linear / llama_dynamic / mistral / qwen2 / mixtral / gpt2 causal
LMs and a tiny bert sequence classifier), this builds the model from a config with random weights
(torch.manual_seed per model; nothing is downloaded from the Hub), in float32 with
attn_implementation="eager" and model.eval(), and writes:

  tests/hf/fixtures/<case>/model/               model.save_pretrained(dir), safetensors
                                                (llama: sharded, with model.safetensors.index.json)
  tests/hf/fixtures/<case>/expected.safetensors inputs and the reference outputs of transformers:
                                                fp32 and bf16 logits, loss, greedy generations
  tests/hf/fixtures/cases.json                  per case: class, seed, full config, greedy margins
  tests/hf/fixtures/versions.json               torch / transformers / safetensors versions

See tests/hf/README.md for every tensor's name, dtype and shape.

Run it (after bench/setup.sh, which installs torch and the pinned transformers into .venv-bench):

    .venv-bench/bin/python tests/hf/make_fixtures.py

It runs on the CPU in a few seconds and is deterministic. CI never runs it: its outputs are
committed, and the C++ tests only read them.
"""

import copy
import json
import pathlib
import shutil
import sys

import safetensors
import safetensors.torch
import torch
import transformers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

ROOT = pathlib.Path(__file__).resolve().parent / "fixtures"

VOCAB = 96
PAD = 0
BOS = 1
EOS = VOCAB - 1
INIT_RANGE = 0.3
MIN_MARGIN = 1e-2  # we require this much (the brief asks for >= 1e-3) between top-1 and top-2
MAX_NEW = 8

# Fixed inputs, token ids in 1..VOCAB-2 (0 = pad, VOCAB-1 = eos never appear as real tokens).
INPUT_IDS = [[5, 17, 42, 8, 63, 29, 71], [12, 33, 7, 88, 50, PAD, PAD]]
ATTN_MASK = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]  # row 1 right-padded by 2
TOKEN_TYPE_IDS = [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]]  # bert only
BERT_LABELS = [2, 0]
PROMPT_IDS = [[3, 14, 15, 92, 65]]
BATCH_PROMPT_IDS = [[11, 23, 58, 9, 77, 40], [PAD, PAD, 26, 53, 58, 89]]  # row 1 left-padded by 2
BATCH_PROMPT_MASK = [[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]]

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    initializer_range=INIT_RANGE,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
)


def llama_cfg(**kw):
    return LlamaConfig(**{**COMMON, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, **kw})


# name -> (model class, config factory, base seed)
CASES = {
    "llama": (
        LlamaForCausalLM,
        lambda: llama_cfg(
            num_key_value_heads=2,
            tie_word_embeddings=False,
            # transformers 5 spells the old `rope_scaling` + `rope_theta` as `rope_parameters`.
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
        1000,
    ),
    "llama_linear": (
        LlamaForCausalLM,
        lambda: llama_cfg(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
        2000,
    ),
    "llama_dynamic": (
        LlamaForCausalLM,
        lambda: llama_cfg(
            max_position_embeddings=8,
            rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
        ),
        3000,
    ),
    "mistral": (
        MistralForCausalLM,
        lambda: MistralConfig(
            **COMMON,
            num_key_value_heads=2,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        4000,
    ),
    "qwen2": (
        Qwen2ForCausalLM,
        lambda: Qwen2Config(
            **COMMON,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        5000,
    ),
    "mixtral": (
        MixtralForCausalLM,
        lambda: MixtralConfig(
            **COMMON,
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        6000,
    ),
    "gpt2": (
        GPT2LMHeadModel,
        lambda: GPT2Config(
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            # At 0.3 this tiny GPT-2 greedily repeats one token; 0.5 gives varied continuations.
            initializer_range=0.5,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
        7003,
    ),
    "bert": (
        BertForSequenceClassification,
        lambda: BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
            type_vocab_size=2,
            num_labels=3,
            initializer_range=INIT_RANGE,
            pad_token_id=PAD,
        ),
        8000,
    ),
}


def t64(x):
    return torch.tensor(x, dtype=torch.int64)


def build(cls, make_cfg, seed):
    cfg = make_cfg()
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32).eval()
    model.config._attn_implementation = "eager"
    return model


def step_margins(logits_per_step):
    """Top-1 minus top-2 over every step / row of a generate(output_logits=True) result."""
    out = []
    for step in logits_per_step:
        top2 = step.float().topk(2, dim=-1).values
        out.append((top2[:, 0] - top2[:, 1]))
    return torch.stack(out)  # [steps, batch]


def greedy(model, ids, mask, use_cache=True):
    with torch.no_grad():
        res = model.generate(
            input_ids=ids,
            use_cache=use_cache,
            attention_mask=mask,
            max_new_tokens=MAX_NEW,
            do_sample=False,
            num_beams=1,
            pad_token_id=PAD,
            eos_token_id=EOS,
            output_logits=True,
            return_dict_in_generate=True,
        )
    seq = res.sequences
    if seq.shape != (ids.shape[0], ids.shape[1] + MAX_NEW) or (seq[:, ids.shape[1] :] == EOS).any():
        return seq, None  # stopped at eos: this seed is rejected
    logits = torch.stack(res.logits)  # [steps, batch, vocab]
    # greedy picks the argmax of the raw logits (no logits processors are active)
    assert torch.equal(logits.argmax(-1).T, seq[:, ids.shape[1] :]), "generate did not pick the argmax"
    return seq, step_margins(res.logits)


def causal_case(model):
    ids, mask = t64(INPUT_IDS), t64(ATTN_MASK)
    labels = ids.masked_fill(mask == 0, -100)
    out = {}
    with torch.no_grad():
        out["logits"] = model(input_ids=ids, attention_mask=mask).logits.float()
        out["loss"] = model(input_ids=ids, attention_mask=mask, labels=labels).loss.float()
        m16 = copy.deepcopy(model).to(torch.bfloat16)
        out["logits_bf16"] = m16(input_ids=ids, attention_mask=mask).logits.float()
        del m16
    out.update(input_ids=ids, attention_mask=mask, labels=labels)

    p = t64(PROMPT_IDS)
    g, m1 = greedy(model, p, torch.ones_like(p))
    bp, bm = t64(BATCH_PROMPT_IDS), t64(BATCH_PROMPT_MASK)
    bg, m2 = greedy(model, bp, bm)
    if m1 is None or m2 is None:
        return out, {"greedy_margin": 0.0, "emits_eos": True}
    out.update(prompt_ids=p, greedy_ids=g, batch_prompt_ids=bp, batch_prompt_mask=bm, batch_greedy_ids=bg)
    margin = torch.minimum(m1.min(), m2.min())
    out["greedy_margin"] = margin.float()

    # Sanity: each left-padded batch row must generate what it generates alone, unpadded.
    consistent = True
    for r in range(bp.shape[0]):
        keep = bm[r].bool()
        alone, ma = greedy(model, bp[r : r + 1, keep], torch.ones(1, int(keep.sum()), dtype=torch.int64))
        consistent &= ma is not None and torch.equal(alone[0, int(keep.sum()) :], bg[r, bp.shape[1] :])
    # Sanity: generating without the KV cache (every step re-runs the whole sequence) gives the same
    # tokens. This matters for llama_dynamic: with the cache, transformers keeps each cached key
    # rotated with the dynamic-NTK frequencies of the step that produced it; we pick a seed where
    # that choice does not change any greedy token.
    g_nc, _ = greedy(model, p, torch.ones_like(p), use_cache=False)
    bg_nc, _ = greedy(model, bp, bm, use_cache=False)
    nocache_same = torch.equal(g_nc, g) and torch.equal(bg_nc, bg)
    gen_tokens = torch.cat([g[:, p.shape[1]:].flatten(), bg[:, bp.shape[1]:].flatten()])
    info = {
        "greedy_margin": float(margin),
        "greedy_margin_single": float(m1.min()),
        "greedy_margin_batch": float(m2.min()),
        "emits_eos": bool((gen_tokens == EOS).any()),
        "emits_pad": bool((gen_tokens == PAD).any()),
        "batch_rows_match_unbatched": bool(consistent),
        "cached_matches_uncached": bool(nocache_same),
        "bf16_max_abs_logit_diff_unpadded": float((out["logits_bf16"] - out["logits"])[mask.bool()].abs().max()),
        "greedy_ids": g.tolist(),
        "batch_greedy_ids": bg.tolist(),
    }
    return out, info


def bert_case(model):
    ids, mask, tt = t64(INPUT_IDS), t64(ATTN_MASK), t64(TOKEN_TYPE_IDS)
    labels = t64(BERT_LABELS)
    out = dict(input_ids=ids, attention_mask=mask, token_type_ids=tt, labels=labels)
    with torch.no_grad():
        out["logits"] = model(input_ids=ids, attention_mask=mask, token_type_ids=tt).logits.float()
        out["loss"] = model(input_ids=ids, attention_mask=mask, token_type_ids=tt, labels=labels).loss.float()
        m16 = copy.deepcopy(model).to(torch.bfloat16)
        out["logits_bf16"] = m16(input_ids=ids, attention_mask=mask, token_type_ids=tt).logits.float()
    return out, {"bf16_max_abs_logit_diff": float((out["logits_bf16"] - out["logits"]).abs().max())}


def acceptable(info):
    return (
        info["greedy_margin"] >= MIN_MARGIN
        and not info["emits_eos"]
        and info["batch_rows_match_unbatched"]
        and info["cached_matches_uncached"]
    )


def main():
    torch.set_num_threads(1)  # deterministic reductions
    assert max(max(r) for r in INPUT_IDS + PROMPT_IDS + BATCH_PROMPT_IDS) <= VOCAB - 2
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    cases_json = {}
    for name, (cls, make_cfg, base_seed) in CASES.items():
        # Deterministic search: the first seed from base_seed whose greedy decoding is robust.
        for seed in range(base_seed, base_seed + 50):
            model = build(cls, make_cfg, seed)
            if cls is BertForSequenceClassification:
                out, info = bert_case(model)
                break
            out, info = causal_case(model)
            if acceptable(info):
                break
            why = {k: v for k, v in info.items() if k in ("greedy_margin", "emits_eos", "batch_rows_match_unbatched", "cached_matches_uncached")}
            print(f"{name}: seed {seed} rejected: {why}")
        else:
            sys.exit(f"{name}: no seed in range gives margin >= {MIN_MARGIN} without eos")

        if name == "llama_dynamic":
            # Extra: one no-cache forward over the whole 13-token greedy sequence, so dynamic NTK
            # scaling (seq_len 13 > max_position_embeddings 8) applies to every position at once.
            long_ids = out["greedy_ids"]
            with torch.no_grad():
                out["long_logits"] = model(input_ids=long_ids).logits.float()
            out["long_ids"] = long_ids.clone()

        d = ROOT / name
        # Save a fresh copy with the same seed (the dynamic-RoPE model mutates its inv_freq buffer,
        # which is not persistent, so the weights are identical either way).
        save = build(cls, make_cfg, seed)
        if name == "llama":
            save.save_pretrained(d / "model", max_shard_size="40KB")
            assert (d / "model" / "model.safetensors.index.json").exists()
            assert len(list((d / "model").glob("model-*.safetensors"))) >= 2
        else:
            save.save_pretrained(d / "model")
        tensors = {k: v.detach().contiguous() for k, v in out.items()}
        for k, v in tensors.items():
            assert v.dtype in (torch.int64, torch.float32), (k, v.dtype)
        safetensors.torch.save_file(tensors, str(d / "expected.safetensors"), metadata={"case": name})

        cfg = json.loads(save.config.to_json_string(use_diff=False))
        cases_json[name] = {"class": cls.__name__, "seed": seed, "initializer_range": cfg["initializer_range"], **info, "config": cfg}
        if "greedy_margin" in info:
            print(
                f"{name:14s} seed {seed}  smallest greedy margin {info['greedy_margin']:.4f} "
                f"(single {info['greedy_margin_single']:.4f}, batch {info['greedy_margin_batch']:.4f})  "
                f"eos {info['emits_eos']}  pad {info['emits_pad']}  "
                f"batch==unbatched {info['batch_rows_match_unbatched']}  "
                f"cached==uncached {info['cached_matches_uncached']}  "
                f"bf16 max|diff| {info['bf16_max_abs_logit_diff_unpadded']:.3f}"
            )
            print(f"{'':14s} greedy {info['greedy_ids'][0]}  batch {info['batch_greedy_ids']}")
        else:
            print(f"{name:14s} seed {seed}  logits {tensors['logits'].tolist()}  loss {float(tensors['loss']):.5f}")
        for k, v in tensors.items():
            print(f"{'':14s} {k:18s} {str(v.dtype):14s} {list(v.shape)}")

    (ROOT / "cases.json").write_text(json.dumps(cases_json, indent=1, sort_keys=True) + "\n")
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "python": sys.version.split()[0],
    }
    (ROOT / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    print(versions)


if __name__ == "__main__":
    main()
