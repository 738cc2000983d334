"""Make the fine-tuning reference fixtures under tests/finetune/fixtures/ (issue 25).

Everything is computed by the real Hugging Face `transformers` and `peft` on the tiny models that are
already committed under tests/hf/fixtures/<model>/model (nothing is downloaded, nothing is built here
from a config), on the CPU, in float32, so that libacc's parameter groups and LoRA adapters can be
checked against them:

  fixtures/versions.json        torch / transformers / peft / safetensors / python versions
  fixtures/decay_names.json     per architecture: Trainer.get_decay_parameter_names(model) and the
                                model's named_parameters(), so the no-decay set is known exactly
  fixtures/cases.json           per LoRA case: base model, the LoraConfig arguments, the modules peft
                                targeted (r, lora_alpha, scaling each), trainable parameter names,
                                the saved keys and shapes, the inputs, sanity numbers
  fixtures/<case>/adapter_config.json, adapter_model.safetensors
                                PeftModel.save_pretrained(dir), exactly as peft writes them
  fixtures/<case>/expected.safetensors
                                inputs, logits with the adapter, loss, gradients of every trainable
                                tensor, greedy ids, logits after merge_and_unload and (some cases) the
                                merged checkpoint's tensors that changed, under their on-disk names

See tests/finetune/README.md for every tensor's name and meaning, and PEFT_NOTES.md for peft's rules.

Run it from anywhere (after bench/setup.sh, which installs torch, transformers and peft into .venv-bench):

    .venv-bench/bin/python tests/finetune/make_fixtures.py

It takes a few seconds, is deterministic (it re-executes itself with PYTHONHASHSEED=0, because peft
writes target_modules from a Python set), and checks its own outputs: every adapter is loaded back with
PeftModel.from_pretrained and must reproduce the logits and gradients bit for bit.
"""

import glob
import json
import os
import pathlib
import shutil
import sys
import tempfile

if os.environ.get("PYTHONHASHSEED") != "0":
    # peft keeps target_modules as a set and writes it as list(set): pin string hashing so the
    # order in adapter_config.json is the same on every run.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

import warnings

import peft
import safetensors
import safetensors.torch
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer, ParamWrapper
from peft.tuners.tuners_utils import _remove_adapter_name_from_state_dict_key
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, Trainer

REPO = pathlib.Path(__file__).resolve().parents[2]
ROOT = pathlib.Path(__file__).resolve().parent / "fixtures"
HF = "tests/hf/fixtures"  # relative to REPO: it is what adapter_config.json's base_model_name_or_path holds

# The inputs of tests/hf/fixtures (same ids, same padding), so the base logits there apply here too.
PAD = 0
INPUT_IDS = [[5, 17, 42, 8, 63, 29, 71], [12, 33, 7, 88, 50, PAD, PAD]]
ATTN_MASK = [[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]
TOKEN_TYPE_IDS = [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1]]  # bert only
BERT_LABELS = [2, 0]
PROMPT_IDS = [[3, 14, 15, 92, 65]]
MAX_NEW = 8
B_STD = 0.1  # lora_B is set to N(0, B_STD^2) after creation so that no adapter is a no-op
PERTURB_STD = 0.05  # noise added to modules_to_save copies and trainable biases, for the same reason

# Architectures whose decay names are recorded (tests/hf/fixtures/<name>/model).
DECAY_MODELS = ["llama", "mistral", "qwen2", "mixtral", "gpt2", "bert"]

# The LoRA cases. "config" holds the LoraConfig keyword arguments exactly as passed.
CASES = [
    dict(
        name="llama_qv",
        model="llama",
        seed=11,
        note="the classic recipe: q_proj and v_proj, r=4, alpha=8 (scaling 2), no dropout",
        config=dict(task_type="CAUSAL_LM", r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]),
    ),
    dict(
        name="llama_all_linear",
        model="llama",
        seed=12,
        note="'all-linear': every nn.Linear except the output head (lm_head); lora_dropout 0.05 "
        "(outputs are taken in eval mode, where dropout is the identity)",
        config=dict(task_type="CAUSAL_LM", r=4, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear"),
    ),
    dict(
        name="llama_rslora",
        model="llama",
        seed=13,
        note="use_rslora: scaling = lora_alpha / sqrt(r) = 8 / 2 = 4; init 'gaussian' (only recorded, "
        "lora_B is overwritten anyway)",
        config=dict(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            use_rslora=True,
            init_lora_weights="gaussian",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        ),
    ),
    dict(
        name="llama_patterns",
        model="llama",
        seed=14,
        note="rank_pattern / alpha_pattern: keys are regexes matched as re.match(r'(.*\\.)?(KEY)$', module "
        "name), FIRST match in the dict's order wins (peft writes the JSON with sorted keys, so use the "
        "file's order). 'model.layers.1.self_attn.q_proj' sorts before 'q_proj', so layer 1's q_proj "
        "gets r=8 and layer 0's r=2; a regex key picks layer 1's gate_proj",
        config=dict(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "gate_proj", "down_proj"],
            # insertion order == sorted order, so in-memory and reloaded configs agree
            rank_pattern={
                "down_proj": 6,
                "layers\\.1\\.mlp\\.gate_proj": 3,
                "model.layers.1.self_attn.q_proj": 8,
                "q_proj": 2,
            },
            alpha_pattern={"q_proj": 5, "v_proj": 3},
        ),
    ),
    dict(
        name="llama_modules_to_save",
        store_merged=True,
        model="llama",
        seed=15,
        note="modules_to_save ['lm_head']: a trainable copy of lm_head (perturbed here), saved in full as "
        "base_model.model.lm_head.weight",
        config=dict(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj"],
            modules_to_save=["lm_head"],
        ),
    ),
    dict(
        name="llama_layers",
        model="llama",
        seed=16,
        note="layers_to_transform [1] with layers_pattern 'layers': only layer 1's seven linears; "
        "init_lora_weights False (A and B both nn.Linear's default init; B is overwritten anyway)",
        config=dict(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            init_lora_weights=False,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            layers_to_transform=[1],
            layers_pattern="layers",
        ),
    ),
    dict(
        name="llama_regex",
        model="llama",
        seed=17,
        note="target_modules as ONE string: re.fullmatch against the full module name; no task_type, so "
        "peft writes auto_mapping and from_pretrained gives a plain PeftModel",
        config=dict(
            r=4,
            lora_alpha=4,
            target_modules=r".*\.layers\.0\.self_attn\.(q|k)_proj|.*\.layers\.1\.mlp\.up_proj",
        ),
    ),
    dict(
        name="mistral_attn",
        model="mistral",
        seed=18,
        note="Mistral (GQA, 2 kv heads): the four attention projections, r=2, alpha=4",
        config=dict(task_type="CAUSAL_LM", r=2, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
    ),
    dict(
        name="qwen2_bias_lora_only",
        store_merged=True,
        model="qwen2",
        seed=19,
        note="bias 'lora_only': the biases of TARGETED layers train (q_proj, v_proj have biases, o_proj has "
        "none; k_proj's bias stays frozen); saved as <module>.base_layer.bias. Tied lm_head (untouched)",
        config=dict(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "o_proj"],
            bias="lora_only",
        ),
    ),
    dict(
        name="gpt2_conv1d",
        store_merged=True,
        model="gpt2",
        seed=20,
        note="GPT-2 Conv1D (weight [in, out]) needs fan_in_fan_out=True; 'c_proj' matches attn.c_proj "
        "AND mlp.c_proj (suffix match). bias 'all': EVERY bias of the model trains (LayerNorm biases "
        "included), saved under its plain name, or <module>.base_layer.bias inside targeted layers",
        config=dict(
            task_type="CAUSAL_LM",
            r=4,
            lora_alpha=8,
            target_modules=["c_attn", "c_proj"],
            fan_in_fan_out=True,
            bias="all",
        ),
    ),
    dict(
        name="mixtral_all_linear",
        model="mixtral",
        seed=21,
        note="'all-linear' on Mixtral under transformers 5: the experts are fused nn.Parameters in memory, "
        "not nn.Linear, so only the attention projections and the router (block_sparse_moe.gate / "
        "mlp.gate) are targeted; see targeted_modules",
        config=dict(task_type="CAUSAL_LM", r=2, lora_alpha=4, target_modules="all-linear"),
    ),
    dict(
        name="bert_seq_cls",
        model="bert",
        seed=22,
        note="SEQ_CLS: peft appends 'classifier' and 'score' to modules_to_save by itself; the classifier "
        "copy trains (perturbed here) and is saved in full. Loss: mean cross-entropy over the 2 rows",
        config=dict(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"]),
    ),
]


def read_checkpoint(model_dir):
    """All tensors of a transformers checkpoint directory (sharded or not), by on-disk name."""
    out = {}
    for f in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        out.update(safetensors.torch.load_file(f))
    return out


def check_mixtral_experts(adapter, targeted, base_disk, merged_disk, num_experts):
    """The per-expert LoRA packed in peft's fused-expert tensors, written out per expert, is what
    merge_and_unload + save_pretrained put into block_sparse_moe.experts.E.w1/w2/w3 (see PEFT_NOTES.md)."""
    E = num_experts
    checked = 0
    for mod, t in targeted.items():
        pname = t.get("parameter_name")
        if pname not in ("gate_up_proj", "down_proj"):
            continue
        layer = mod.split(".layers.")[1].split(".")[0]
        A = adapter[f"base_model.model.{mod}.lora_A.weight"]  # [E*r, in]: expert-major rows
        B = adapter[f"base_model.model.{mod}.lora_B.weight"]  # [out, r*E]: expert-minor columns
        r = t["r"]
        A = A.reshape(E, r, A.shape[-1])
        B = B.reshape(B.shape[0], r, E)
        for e in range(E):
            delta = t["scaling"] * (B[:, :, e] @ A[e])  # [out, in], the nn.Linear orientation
            pre = f"model.layers.{layer}.block_sparse_moe.experts.{e}"
            if pname == "gate_up_proj":
                half = delta.shape[0] // 2
                parts = {"w1": delta[:half], "w3": delta[half:]}  # gate first, then up
            else:
                parts = {"w2": delta}
            for w, d in parts.items():
                k = f"{pre}.{w}.weight"
                assert (merged_disk[k] - (base_disk[k] + d)).abs().max() < 1e-6, k
                checked += 1
    assert checked == 3 * E * 2, checked


def load_base(model):
    path = f"{HF}/{model}/model"
    cls = AutoModelForSequenceClassification if model == "bert" else AutoModelForCausalLM
    m = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def inputs_for(model):
    ids = torch.tensor(INPUT_IDS, dtype=torch.int64)
    mask = torch.tensor(ATTN_MASK, dtype=torch.int64)
    if model == "bert":
        return dict(
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=torch.tensor(TOKEN_TYPE_IDS, dtype=torch.int64),
            labels=torch.tensor(BERT_LABELS, dtype=torch.int64),
        )
    return dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))


def forward_and_grads(m, inp):
    """Logits, loss and the gradient of every trainable parameter (in-memory names), in eval mode."""
    m.eval()
    m.zero_grad(set_to_none=True)
    out = m(**inp)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.requires_grad}
    missing = [n for n, p in m.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing
    m.zero_grad(set_to_none=True)
    return out.logits.detach().clone(), out.loss.detach().clone(), grads


def saved_key(name):
    """The adapter_model.safetensors key of an in-memory trainable parameter of a PeftModel."""
    # ModulesToSaveWrapper: <m>.modules_to_save.<adapter>.<p> is saved as <m>.<p>
    name = name.replace(".modules_to_save.default.", ".")
    return _remove_adapter_name_from_state_dict_key(name, "default")


def greedy(m, prompt):
    out = m.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=MAX_NEW,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
    )
    margin = min(float(s.topk(2, dim=-1).values.diff(dim=-1).abs().min()) for s in out.scores)
    return out.sequences, margin


def decay_entry(m, model_dir):
    decay = Trainer.get_decay_parameter_names(None, m)  # `self` is unused by the method
    names = [n for n, _ in m.named_parameters()]
    return {
        "class": type(m).__name__,
        "model_dir": model_dir,
        "parameter_names": names,
        "decay": decay,
        "no_decay": [n for n in names if n not in decay],
        "decay_not_in_named_parameters": [n for n in decay if n not in names],
    }


def make_decay_names():
    out = {}
    for model in DECAY_MODELS:
        out[model] = decay_entry(load_base(model), f"{HF}/{model}/model")
    return out


def make_case(case):
    name, model = case["name"], case["model"]
    out_dir = ROOT / name
    base = load_base(model)
    inp = inputs_for(model)
    with torch.no_grad():
        base_logits = base(**inp).logits.clone()
    if model != "bert":
        # the committed base is what tests/hf checked: same logits
        ref = safetensors.torch.load_file(REPO / HF / model / "expected.safetensors")["logits"]
        assert torch.equal(base_logits, ref) or (base_logits - ref).abs().max() < 1e-5, name

    torch.manual_seed(case["seed"])
    cfg = LoraConfig(**case["config"])
    pm = get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(case["seed"] + 1000)
    with torch.no_grad():
        for mod in pm.modules():
            if isinstance(mod, LoraLayer):
                w = mod.lora_B["default"].weight
                w.copy_(torch.randn(w.shape, generator=g) * B_STD)
        for n, p in pm.named_parameters():
            # trainable copies (modules_to_save) and trainable biases start equal to the base:
            # perturb them so that loading them back is visible in the outputs
            if p.requires_grad and ".lora_" not in n:
                p.add_(torch.randn(p.shape, generator=g) * PERTURB_STD)

    targeted = {}
    for mn, mod in pm.named_modules():
        if isinstance(mod, LoraLayer):
            t = {
                "class": f"lora.{type(mod).__name__}",
                "r": mod.r["default"],
                "lora_alpha": mod.lora_alpha["default"],
                "scaling": mod.scaling["default"],
                "fan_in_fan_out": bool(getattr(mod, "fan_in_fan_out", False)),
                "in_features": mod.in_features,
                "out_features": mod.out_features,
            }
            if isinstance(mod, ParamWrapper):
                # a LoRA on one nn.Parameter (target_parameters); 3-d = fused experts
                t["parameter_name"] = mod.parameter_name
                t["num_experts"] = mod.num_experts
                t["parameter_shape"] = list(mod.get_param().shape)
            targeted[mn.removeprefix("base_model.model.")] = t

    logits, loss, grads = forward_and_grads(pm, inp)
    assert (logits - base_logits).abs().max() > 1e-2, f"{name}: the adapter changes nothing"

    record = {
        "model": model,
        "base_model_dir": f"{HF}/{model}/model",
        "seed": case["seed"],
        "note": case["note"],
        "lora_config_args": case["config"],
        "targeted_modules": targeted,
        "trainable_parameters": {n: list(p.shape) for n, p in pm.named_parameters() if p.requires_grad},
        "num_trainable": sum(p.numel() for p in pm.parameters() if p.requires_grad),
        "num_total": sum(p.numel() for p in pm.parameters()),
        "loss": float(loss),
        "max_abs_logits_adapter_minus_base": float((logits - base_logits).abs().max()),
    }

    tensors = {k: v for k, v in inp.items()}
    tensors["logits"] = logits
    tensors["loss"] = loss
    for n, gr in grads.items():
        tensors[f"grad/{saved_key(n)}"] = gr

    if model != "bert":
        ids, margin = greedy(pm, torch.tensor(PROMPT_IDS, dtype=torch.int64))
        tensors["prompt_ids"] = torch.tensor(PROMPT_IDS, dtype=torch.int64)
        tensors["greedy_ids"] = ids
        record["greedy_margin"] = margin

    if out_dir.exists():
        shutil.rmtree(out_dir)
    pm.save_pretrained(str(out_dir))
    (out_dir / "README.md").unlink()  # peft's model-card template, nothing a loader reads
    saved = safetensors.torch.load_file(out_dir / "adapter_model.safetensors")
    grad_keys = {k.removeprefix("grad/") for k in tensors if k.startswith("grad/")}
    assert grad_keys == set(saved), (name, sorted(grad_keys ^ set(saved)))
    record["saved_keys"] = {k: list(v.shape) for k, v in sorted(saved.items())}

    merged = pm.merge_and_unload()
    with torch.no_grad():
        out_m = merged(**inp)
    tensors["logits_merged"] = out_m.logits.detach().clone()
    record["loss_merged"] = float(out_m.loss)
    record["max_abs_logits_merged_minus_adapter"] = float((out_m.logits - logits).abs().max())
    assert record["max_abs_logits_merged_minus_adapter"] < 1e-4, name
    # the merged model as a plain transformers checkpoint: which on-disk tensors changed
    base_disk = read_checkpoint(REPO / HF / model / "model")
    with tempfile.TemporaryDirectory() as tmp:
        merged.save_pretrained(tmp)
        merged_disk = read_checkpoint(tmp)
    assert set(merged_disk) == set(base_disk), (name, sorted(set(merged_disk) ^ set(base_disk)))
    changed = sorted(k for k in merged_disk if not torch.equal(merged_disk[k], base_disk[k]))
    record["merged_changed"] = changed
    if case.get("store_merged"):
        for k in changed:
            tensors[f"merged/{k}"] = merged_disk[k]
    if model == "mixtral":
        check_mixtral_experts(saved, targeted, base_disk, merged_disk, merged.config.num_local_experts)

    tensors = {k: v.contiguous() for k, v in tensors.items()}
    safetensors.torch.save_file(tensors, out_dir / "expected.safetensors", metadata={"case": name})
    return record


def check_case(name, record):
    """An adapter loaded back by peft reproduces the recorded logits and gradients."""
    out_dir = ROOT / name
    exp = safetensors.torch.load_file(out_dir / "expected.safetensors")
    inp = {k: exp[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels") if k in exp}
    base = load_base(record["model"])
    pm = PeftModel.from_pretrained(base, str(out_dir), is_trainable=True)
    logits, loss, grads = forward_and_grads(pm, inp)
    assert torch.equal(logits, exp["logits"]), name
    assert torch.equal(loss, exp["loss"]), name
    got = {f"grad/{saved_key(n)}": g for n, g in grads.items()}
    want = {k: v for k, v in exp.items() if k.startswith("grad/")}
    assert set(got) == set(want), (name, sorted(set(got) ^ set(want)))
    for k in want:
        assert torch.equal(got[k], want[k]), (name, k)
    merged = pm.merge_and_unload()
    with torch.no_grad():
        lm = merged(**inp).logits
    assert torch.equal(lm, exp["logits_merged"]), name


def main():
    os.chdir(REPO)  # base_model_name_or_path is written relative to the repository root
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)  # same reduction order on every machine
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)

    decay = make_decay_names()
    cases = {}
    for case in CASES:
        cases[case["name"]] = make_case(case)
        print(f"{case['name']}: {len(cases[case['name']]['targeted_modules'])} targeted, "
              f"{cases[case['name']]['num_trainable']} trainable, loss {cases[case['name']]['loss']:.5f}")

    # decay names of two adapted models, as Trainer sees a PeftModel (in-memory names)
    decay["peft"] = {}
    for cname in ("llama_modules_to_save", "qwen2_bias_lora_only"):
        pm = PeftModel.from_pretrained(load_base(cases[cname]["model"]), str(ROOT / cname), is_trainable=True)
        entry = decay_entry(pm, f"{cases[cname]['base_model_dir']} + tests/finetune/fixtures/{cname}")
        entry["trainable"] = [n for n, p in pm.named_parameters() if p.requires_grad]
        decay["peft"][cname] = entry

    for cname, record in cases.items():
        check_case(cname, record)

    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "safetensors": safetensors.__version__,
        "python": sys.version.split()[0],
    }
    (ROOT / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    (ROOT / "decay_names.json").write_text(json.dumps(decay, indent=1) + "\n")
    inputs = {
        "input_ids": INPUT_IDS,
        "attention_mask": ATTN_MASK,
        "labels_causal_lm": "input_ids with -100 where attention_mask is 0",
        "token_type_ids_bert": TOKEN_TYPE_IDS,
        "labels_bert": BERT_LABELS,
        "prompt_ids": PROMPT_IDS,
        "max_new_tokens": MAX_NEW,
        "mode": "model.eval() for every forward and backward (dropout off)",
        "lora_B_init": f"after get_peft_model, every lora_B = N(0, {B_STD}^2) from torch.Generator(seed + 1000)",
        "perturbation": f"then every other trainable tensor (modules_to_save copies, trainable biases) += "
        f"N(0, {PERTURB_STD}^2) from the same generator",
    }
    (ROOT / "cases.json").write_text(json.dumps({"inputs": inputs, "cases": cases}, indent=1) + "\n")
    print("checked: every adapter reloaded with PeftModel.from_pretrained reproduces logits, loss, "
          "gradients and merged logits exactly")


if __name__ == "__main__":
    main()
