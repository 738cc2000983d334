"""Record reference fixtures for libacc's big-model inference from the REAL Hugging Face Accelerate.

What it makes
    tests/bigmodel/fixtures/device_maps.json: for a set of transformers models built on the meta device
    (``accelerate.init_empty_weights()`` + ``AutoModelFor*.from_config``; no weights, no downloads) it records
    Accelerate's own outputs of ``compute_module_sizes``, ``find_tied_parameters``, ``get_max_memory``,
    ``get_max_layer_size``, ``get_balanced_memory``, ``infer_auto_device_map`` and ``convert_file_size_to_int``,
    together with the exact inputs, so that libacc's C++ port (src/bigmodel, src/models/hf) can be checked
    against them without Python. The schema is documented in tests/bigmodel/README.md.

How to run it
    /work/main/.venv-bench/bin/python tests/bigmodel/make_device_map_fixtures.py
    (any environment with torch, accelerate and transformers works; no GPU is needed: every budget is passed
    explicitly as ``max_memory``, which is all ``get_max_memory``/``get_balanced_memory`` need).

CI never runs this script. Its output is committed; re-run it only to refresh the fixtures deliberately
(e.g. after an Accelerate upgrade) and review the diff.
"""

import copy
import json
import logging
import os
import sys
import warnings

import accelerate
import torch
import transformers
from accelerate import init_empty_weights
from accelerate.utils import (
    compute_module_sizes,
    convert_file_size_to_int,
    find_tied_parameters,
    get_balanced_memory,
    get_max_layer_size,
    get_max_memory,
    infer_auto_device_map,
)
from accelerate.utils.modeling import dtype_byte_size, named_module_tensors
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    BertConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "device_maps.json")

GiB = 2**30

# --------------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------------

MODEL_SPECS = {
    "llama7b_gqa": (
        AutoModelForCausalLM,
        LlamaConfig,
        dict(
            hidden_size=4096,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            intermediate_size=11008,
            vocab_size=32000,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
        ),
    ),
    "llama_small": (
        AutoModelForCausalLM,
        LlamaConfig,
        dict(
            hidden_size=512,
            num_hidden_layers=8,
            num_attention_heads=8,
            num_key_value_heads=4,
            intermediate_size=1376,
            vocab_size=32000,
            max_position_embeddings=2048,
            tie_word_embeddings=False,
        ),
    ),
    "mistral_small": (
        AutoModelForCausalLM,
        MistralConfig,
        dict(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            intermediate_size=768,
            vocab_size=32000,
            tie_word_embeddings=False,
        ),
    ),
    "qwen2_tied": (
        AutoModelForCausalLM,
        Qwen2Config,
        dict(
            hidden_size=512,
            num_hidden_layers=6,
            num_attention_heads=8,
            num_key_value_heads=2,
            intermediate_size=2048,
            vocab_size=8192,
            tie_word_embeddings=True,
        ),
    ),
    "mixtral_8x_small": (
        AutoModelForCausalLM,
        MixtralConfig,
        dict(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            intermediate_size=512,
            num_local_experts=8,
            num_experts_per_tok=2,
            vocab_size=32000,
            tie_word_embeddings=False,
        ),
    ),
    "gpt2_124m": (AutoModelForCausalLM, GPT2Config, dict()),  # GPT-2 small defaults; lm_head tied to wte
    "bert_base_cls": (AutoModelForSequenceClassification, BertConfig, dict(num_labels=2)),
}


def build_model(name):
    auto, cfg_cls, kwargs = MODEL_SPECS[name]
    config = cfg_cls(**kwargs)
    with init_empty_weights():
        model = auto.from_config(config)
    # transformers 5 does not tie the weights of a model created under init_empty_weights (meta device);
    # Accelerate's own docs ask for tie_weights() before infer_auto_device_map, which is what loading does.
    model.tie_weights()
    model.eval()
    return model, config


def dtype_key(dtype):
    return "none" if dtype is None else str(dtype).replace("torch.", "")


def torch_dtype(key):
    return None if key is None else getattr(torch, key)


# --------------------------------------------------------------------------------------------------------------------
# Encoding helpers
# --------------------------------------------------------------------------------------------------------------------


def pairs(mm):
    """max_memory dict -> list of [device, value] pairs (device int for GPUs, str otherwise), order preserved."""
    return [[k, v] for k, v in mm.items()]


class LogCapture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records = []

    def emit(self, record):
        msg = record.getMessage()
        # Environment-dependent (counts the GPUs of the recording machine): not part of the fixture.
        if "is not available, available devices are" in msg:
            return
        self.records.append({"level": record.levelname, "message": msg})


def run_captured(fn):
    handler = LogCapture()
    lg = logging.getLogger("accelerate.utils.modeling")
    old_level = lg.level
    lg.setLevel(logging.DEBUG)
    lg.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            result = fn()
    finally:
        lg.removeHandler(handler)
        lg.setLevel(old_level)
    warns = [str(x.message) for x in w if "accelerate" in (x.filename or "")]
    return result, warns, handler.records


# --------------------------------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------------------------------

LLAMA = ["LlamaDecoderLayer"]


def case(cid, model, exercises, description, max_memory, no_split, dtype, mode="infer", offload_buffers=False,
         fallback_allocation=False, check=None, expect_error=False, expect_warning=False):
    return dict(
        id=cid,
        model=model,
        exercises=exercises,
        description=description,
        mode=mode,
        max_memory=max_memory,
        no_split=no_split,
        dtype=dtype,
        offload_buffers=offload_buffers,
        fallback_allocation=fallback_allocation,
        check=check,
        expect_error=expect_error,
        expect_warning=expect_warning,
    )


def devices_of(dm):
    return set(dm.values())


def make_cases(sizes):
    """sizes[model][dtype_key] -> module_sizes; budgets below are derived from them (then recorded as literals)."""
    l7h = sizes["llama7b_gqa"]["float16"]
    l7_layer = l7h["model.layers.0"]  # largest no-split layer in fp16 (354435072)
    ls32 = sizes["llama_small"]["float32"]
    ls_layer = ls32["model.layers.0"]
    ls_embed = ls32["model.embed_tokens"]
    q2 = sizes["qwen2_tied"]["float32"]
    bert = sizes["bert_base_cls"]["float32"]
    bert_layer = bert["bert.encoder.layer.0"]
    mx = sizes["mixtral_8x_small"]["float32"]
    gpt2 = sizes["gpt2_124m"]["float32"]

    C = []
    # ---- llama 7B-like (GQA), fp16 unless noted --------------------------------------------------------------------
    C.append(case("llama7b_fp16_all_gpu0", "llama7b_gqa", ["all_on_gpu0", "string_budgets"],
                  "Everything fits on GPU 0 (24GiB) -> {'': 0}.",
                  {0: "24GiB", "cpu": "64GiB"}, LLAMA, "float16",
                  check=lambda dm: dm == {"": 0}))
    C.append(case("llama7b_fp16_split_2gpu", "llama7b_gqa", ["split_2_gpus", "string_budgets", "implicit_disk"],
                  "Two 7GiB GPUs, no cpu key (Accelerate appends 'disk' itself); GPU 0 keeps the largest layer free.",
                  {0: "7GiB", 1: "7GiB"}, LLAMA, "float16",
                  check=lambda dm: devices_of(dm) == {0, 1}))
    C.append(case("llama7b_fp16_split_3gpu_odd", "llama7b_gqa", ["split_3_gpus", "odd_budgets", "spill_cpu"],
                  "Three GPUs with odd byte budgets summing to more than the model; only GPU 0 (and cpu) reserve the "
                  "largest layer, so lm_head still spills to CPU.",
                  {0: 4_500_000_001, 1: 4_000_000_003, 2: 4_000_000_007, "cpu": 50_000_000_017}, LLAMA, "float16",
                  check=lambda dm: devices_of(dm) == {0, 1, 2, "cpu"}))
    C.append(case("llama7b_fp32_spill_cpu", "llama7b_gqa", ["spill_cpu", "string_budgets", "float32"],
                  "fp32 weights (23.7GB) on a 12GiB GPU: the tail spills to CPU.",
                  {0: "12GiB", "cpu": "32GiB"}, LLAMA, "float32",
                  check=lambda dm: devices_of(dm) == {0, "cpu"}))
    C.append(case("llama7b_fp16_spill_disk_implicit", "llama7b_gqa", ["spill_cpu", "spill_disk", "implicit_disk"],
                  "GPU 0 and CPU too small: remaining layers go to 'disk' (not listed in max_memory).",
                  {0: "3GiB", "cpu": "2500MB"}, LLAMA, "float16",
                  check=lambda dm: devices_of(dm) == {0, "cpu", "disk"}))
    C.append(case("llama7b_fp16_spill_disk_explicit", "llama7b_gqa", ["spill_cpu", "spill_disk", "explicit_disk",
                                                                     "odd_budgets"],
                  "Explicit 'disk' budget (Accelerate ignores the disk size: it is unbounded).",
                  {0: 2_147_483_647, "cpu": 3_000_000_001, "disk": "100GiB"}, LLAMA, "float16",
                  check=lambda dm: devices_of(dm) == {0, "cpu", "disk"}))
    C.append(case("llama7b_fp16_gpu0_below_max_layer", "llama7b_gqa", ["largest_layer_reservation",
                                                                      "gpu0_gets_nothing"],
                  "GPU 0 budget (300MB) is below the largest layer (354MB): the reservation leaves nothing, GPU 0 "
                  "gets no module and everything lands on GPU 1 (GPU 1 reserves nothing).",
                  {0: 300_000_000, 1: "20GiB", "cpu": "64GiB"}, LLAMA, "float16",
                  check=lambda dm: dm == {"": 1}))
    C.append(case("llama7b_fp16_gpu0_between_1x_2x_layer", "llama7b_gqa", ["largest_layer_reservation",
                                                                          "odd_budgets"],
                  "GPU 0 = largest layer + a bit more than embed_tokens: only embed_tokens fits after the reservation.",
                  {0: l7_layer + l7h["model.embed_tokens"] + 4_000_001, 1: "20GiB"}, LLAMA, "float16",
                  check=lambda dm: dm.get("model.embed_tokens") == 0 and list(dm.values()).count(0) == 1))
    C.append(case("llama7b_bf16_gpu0_small_no_fallback", "llama7b_gqa", ["largest_layer_reservation", "bfloat16",
                                                                        "fallback_off"],
                  "Pair of the next case, fallback_allocation=False: GPU 0 (600000001 B) cannot take embed_tokens after "
                  "reserving the largest layer, so it stays empty.",
                  {0: 600_000_001, 1: "20GiB", "cpu": "64GiB"}, LLAMA, "bfloat16",
                  check=lambda dm: 0 not in devices_of(dm)))
    C.append(case("llama7b_bf16_gpu0_small_fallback", "llama7b_gqa", ["fallback_allocation", "bfloat16",
                                                                     "largest_layer_reservation"],
                  "Same budget with fallback_allocation=True: a BFS finds a module that fits on the empty GPU 0.",
                  {0: 600_000_001, 1: "20GiB", "cpu": "64GiB"}, LLAMA, "bfloat16", fallback_allocation=True,
                  check=lambda dm: 0 in devices_of(dm)))
    C.append(case("llama7b_fp16_cpu_only", "llama7b_gqa", ["no_gpus", "spill_disk", "string_budgets"],
                  "No GPU keys: cpu is the main device (reserves the largest layer), the rest goes to disk.",
                  {"cpu": "8GiB"}, LLAMA, "float16",
                  check=lambda dm: devices_of(dm) == {"cpu", "disk"}))
    C.append(case("llama7b_fp16_unsorted_keys", "llama7b_gqa", ["key_order", "split_2_gpus", "spill_cpu"],
                  "max_memory given as {'cpu', 1, 0}: get_max_memory sorts GPUs first, then mps/cpu/disk.",
                  {"cpu": "40GiB", 1: "5GiB", 0: "5GiB"}, LLAMA, "float16",
                  check=lambda dm: devices_of(dm) == {0, 1, "cpu"}))
    C.append(case("llama7b_fp16_sequential_noncontiguous", "llama7b_gqa", ["sequential", "noncontiguous_gpu_ids"],
                  "device_map='sequential' (= max_memory as given) with GPU ids 0 and 2.",
                  {0: 5_000_000_001, 2: 9_999_999_999, "cpu": "64GiB"}, LLAMA, "float16", mode="sequential",
                  check=lambda dm: devices_of(dm) == {0, 2}))
    C.append(case("llama7b_fp16_sequential_3gpu", "llama7b_gqa", ["sequential", "split_2_gpus"],
                  "device_map='sequential' on three 8GiB GPUs: fills GPU 0 then GPU 1, GPU 2 unused (contrast auto).",
                  {0: "8GiB", 1: "8GiB", 2: "8GiB"}, LLAMA, "float16", mode="sequential",
                  check=lambda dm: devices_of(dm) == {0, 1}))
    C.append(case("llama7b_fp16_auto_3gpu", "llama7b_gqa", ["auto", "balanced", "split_3_gpus"],
                  "device_map='auto' (== 'balanced' in load_checkpoint_and_dispatch) on three 8GiB GPUs.",
                  {0: "8GiB", 1: "8GiB", 2: "8GiB"}, LLAMA, "float16", mode="auto",
                  check=lambda dm: devices_of(dm) == {0, 1, 2}))
    C.append(case("llama7b_fp16_balanced_2gpu", "llama7b_gqa", ["balanced", "split_2_gpus"],
                  "device_map='balanced' on two 20GiB GPUs with cpu.",
                  {0: "20GiB", 1: "20GiB", "cpu": "60GiB"}, LLAMA, "float16", mode="balanced",
                  check=lambda dm: devices_of(dm) == {0, 1}))
    C.append(case("llama7b_fp16_balanced_low_0_3gpu", "llama7b_gqa", ["balanced_low_0", "split_3_gpus"],
                  "device_map='balanced_low_0' on three 10GiB GPUs.",
                  {0: "10GiB", 1: "10GiB", 2: "10GiB", "cpu": "60GiB"}, LLAMA, "float16", mode="balanced_low_0"))
    C.append(case("llama7b_fp16_balanced_low_0_gpu0_used", "llama7b_gqa", ["balanced_low_0", "split_3_gpus",
                                                                          "string_budgets"],
                  "'balanced_low_0' where GPUs 1-2 (4GiB each) cannot hold the model: GPU 0 gets total - sum(others).",
                  {0: "8GiB", 1: "4GiB", 2: "4GiB", "cpu": "32GiB"}, LLAMA, "float16", mode="balanced_low_0",
                  check=lambda dm: 0 in devices_of(dm)))
    C.append(case("llama7b_fp16_balanced_spill_cpu", "llama7b_gqa", ["balanced", "spill_cpu", "string_budgets"],
                  "'balanced' on two 4GiB GPUs for an 11GiB model: budgets clamp to 4GiB and the rest spills to CPU.",
                  {0: "4GiB", 1: "4GiB", "cpu": "16GiB"}, LLAMA, "float16", mode="balanced",
                  check=lambda dm: devices_of(dm) == {0, 1, "cpu"}))
    C.append(case("llama7b_fp16_balanced_low_0_single_gpu", "llama7b_gqa", ["balanced_low_0", "single_gpu"],
                  "'balanced_low_0' with one GPU: low_zero is dropped; an explicit max_memory is not scaled by 0.9.",
                  {0: "16GiB", "cpu": "32GiB"}, LLAMA, "float16", mode="balanced_low_0",
                  check=lambda dm: dm == {"": 0}))
    C.append(case("llama7b_fp16_balanced_with_disk_key_error", "llama7b_gqa", ["balanced", "error"],
                  "get_balanced_memory with a 'disk' key raises (it calls torch.device('disk')); recorded as error.",
                  {0: "8GiB", 1: "8GiB", "cpu": "16GiB", "disk": "100GiB"}, LLAMA, "float16", mode="balanced",
                  expect_error=True))
    # ---- llama small --------------------------------------------------------------------------------------------
    ls_budget = ls_embed + ls_layer * 2 + ls_layer // 2 + ls_embed + 12_345  # reservation (embed) + embed + 2.5 layers
    C.append(case("llama_small_fp32_no_split_on", "llama_small", ["no_split_on", "odd_budgets", "split_2_gpus"],
                  "Budget on GPU 0 = reservation + embed + 2.5 decoder layers: whole layers only.",
                  {0: ls_budget, 1: "1GiB"}, LLAMA, "float32",
                  check=lambda dm: all(k.count(".") <= 2 for k in dm)))
    C.append(case("llama_small_fp32_no_split_off", "llama_small", ["no_split_off", "odd_budgets", "split_2_gpus"],
                  "Same budget with no_split_module_classes=[]: a decoder layer is split into its submodules.",
                  {0: ls_budget, 1: "1GiB"}, [], "float32",
                  check=lambda dm: any(k.count(".") >= 3 for k in dm)))
    C.append(case("llama_small_dtype_none", "llama_small", ["dtype_none", "split_2_gpus", "spill_cpu"],
                  "dtype=None: sizes use the tensors' own dtype (float32 here).",
                  {0: 150_000_001, 1: 90_000_003, "cpu": 1_000_000_007}, LLAMA, None,
                  check=lambda dm: devices_of(dm) == {0, 1, "cpu"}))
    C.append(case("llama_small_fp16_balanced_3gpu", "llama_small", ["balanced", "split_2_gpus", "float16",
                                                                      "gpu0_gets_nothing", "largest_layer_reservation"],
                  "'balanced' over three 1GiB GPUs: GPU 0's balanced budget minus the embed_tokens-sized reservation "
                  "cannot hold embed_tokens, so GPU 0 stays empty (real Accelerate behaviour, logged at INFO).",
                  {0: "1GiB", 1: "1GiB", 2: "1GiB", "cpu": "4GiB"}, LLAMA, "float16", mode="balanced",
                  check=lambda dm: devices_of(dm) == {1, 2}))
    C.append(case("llama_small_fp16_offload_buffers", "llama_small", ["offload_buffers", "spill_cpu", "spill_disk"],
                  "offload_buffers=True with CPU and disk spill (only the buffer-fit warning depends on it).",
                  {0: "80MB", "cpu": "60MB"}, LLAMA, "float16", offload_buffers=True,
                  check=lambda dm: devices_of(dm) == {0, "cpu", "disk"}))
    # ---- mistral small ---------------------------------------------------------------------------------------------
    C.append(case("mistral_small_fp16_split_2gpu", "mistral_small", ["split_2_gpus", "spill_cpu", "odd_budgets",
                                                                        "float16"],
                  "Mistral, two GPUs with odd budgets (GPU 1 holds exactly one layer) and cpu.",
                  {0: 36_000_001, 1: 3_000_001, "cpu": "1GiB"}, ["MistralDecoderLayer"], "float16",
                  check=lambda dm: devices_of(dm) == {0, 1, "cpu"}))
    # ---- qwen2 tied ------------------------------------------------------------------------------------------------
    C.append(case("qwen2_tied_fp32_2gpu", "qwen2_tied", ["tied_weights", "split_2_gpus", "odd_budgets"],
                  "lm_head.weight is tied to model.embed_tokens.weight: lm_head is placed with embed_tokens on GPU 0 "
                  "although it comes last; once embed_tokens is placed the reservation shrinks to a decoder layer.",
                  {0: q2["model.embed_tokens"] * 2 + q2["model.layers.0"] * 5 // 2 + 7, 1: "1GiB"}, ["Qwen2DecoderLayer"],
                  "float32",
                  check=lambda dm: dm.get("lm_head") == 0 and dm.get("model.embed_tokens") == 0 and 1 in devices_of(dm)))
    C.append(case("qwen2_tied_bf16_cpu_disk", "qwen2_tied", ["tied_weights", "spill_cpu", "spill_disk", "bfloat16"],
                  "Tied model spilling to CPU and disk.",
                  {0: "30MB", "cpu": "20MB"}, ["Qwen2DecoderLayer"], "bfloat16",
                  check=lambda dm: devices_of(dm) == {0, "cpu", "disk"} and dm.get("lm_head") == 0))
    # ---- mixtral ---------------------------------------------------------------------------------------------------
    C.append(case("mixtral_fp32_2gpu", "mixtral_8x_small", ["split_2_gpus", "moe", "odd_budgets"],
                  "Mixtral (8 experts) split over two GPUs, decoder layers kept whole.",
                  {0: mx["model.embed_tokens"] * 2 + mx["model.layers.0"] * 2 + 999, 1: "1GiB"},
                  ["MixtralDecoderLayer"], "float32",
                  check=lambda dm: devices_of(dm) == {0, 1}))
    C.append(case("mixtral_bf16_no_split_off_spill", "mixtral_8x_small", ["no_split_off", "moe", "spill_cpu",
                                                                          "bfloat16"],
                  "Mixtral without no_split classes: layers (and the fused expert parameters' module) split; CPU spill.",
                  {0: 40_000_003, 1: 12_345_677, "cpu": "1GiB"}, [], "bfloat16",
                  check=lambda dm: "cpu" in devices_of(dm)))
    C.append(case("mixtral_fp16_balanced_2gpu", "mixtral_8x_small", ["balanced", "moe", "split_2_gpus"],
                  "'balanced' over two GPUs for the MoE model.",
                  {0: "500MB", 1: "500MB", "cpu": "2GB"}, ["MixtralDecoderLayer"], "float16", mode="balanced",
                  check=lambda dm: devices_of(dm) == {0, 1}))
    # ---- gpt2 (tied head) ------------------------------------------------------------------------------------------
    C.append(case("gpt2_fp32_tied_3way", "gpt2_124m", ["tied_weights", "split_2_gpus", "spill_cpu", "odd_budgets"],
                  "GPT-2 124M, lm_head tied to transformer.wte: kept together on GPU 0; blocks split over GPU 1 / cpu.",
                  {0: gpt2["transformer.wte"] * 2 + gpt2["transformer.h.0"] + 1_001, 1: 170_000_001,
                   "cpu": "2GiB"}, ["GPT2Block"], "float32",
                  check=lambda dm: dm.get("lm_head") == 0 and devices_of(dm) == {0, 1, "cpu"}))
    C.append(case("gpt2_fp16_balanced_low_0_3gpu", "gpt2_124m", ["balanced_low_0", "tied_weights", "split_3_gpus"],
                  "'balanced_low_0' over three GPUs for GPT-2 (fp16).",
                  {0: "1GiB", 1: "1GiB", 2: "1GiB", "cpu": "4GiB"}, ["GPT2Block"], "float16",
                  mode="balanced_low_0"))
    # ---- bert classifier (int64 buffers) ---------------------------------------------------------------------------
    C.append(case("bert_fp32_buffers_warning", "bert_base_cls", ["offload_buffers_false", "buffer_warning",
                                                                  "gpu0_gets_nothing", "odd_budgets"],
                  "GPU 0 = one BertLayer + 4001 B. The reservation is re-derived as modules are popped (bert.embeddings "
                  "is excluded once it is being treated, leaving a BertLayer), nothing fits GPU 0, and the 8192 B of "
                  "int64 buffers (position_ids/token_type_ids) on cpu do not fit GPU 0 next to the reserved layer -> "
                  "Accelerate warns (offload_buffers=False).",
                  {0: bert_layer + 4_001, "cpu": "4GiB"}, ["BertEmbeddings", "BertLayer"], "float32",
                  check=lambda dm: 0 not in devices_of(dm), expect_warning=True))
    C.append(case("bert_fp32_buffers_offloaded", "bert_base_cls", ["offload_buffers", "gpu0_gets_nothing"],
                  "Same as bert_fp32_buffers_warning with offload_buffers=True: same map, no warning.",
                  {0: bert_layer + 4_001, "cpu": "4GiB"}, ["BertEmbeddings", "BertLayer"], "float32",
                  offload_buffers=True, check=lambda dm: 0 not in devices_of(dm)))
    C.append(case("bert_fp16_split_2gpu_cpu", "bert_base_cls", ["split_2_gpus", "spill_cpu", "int_buffers_keep_dtype",
                                                                 "string_budgets"],
                  "fp16 BERT: int64 buffers keep 8 bytes/elt; split over 2 GPUs and CPU.",
                  {0: "120MB", 1: "60MB", "cpu": "1GB"}, ["BertEmbeddings", "BertLayer"], "float16",
                  check=lambda dm: devices_of(dm) == {0, 1, "cpu"}))
    return C


CONVERT_INPUTS = [
    "10GiB", "500MB", "1.5GB", "5Gb", "100KiB", "7", 7, "3TB", "2kb", "1MiB", "0.5GiB", "1e3MB", "256mib",
    "-1GB", "12.5Mb", "abcGB",
]


# --------------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------------


def main():
    torch.manual_seed(0)
    models = {}
    for name in MODEL_SPECS:
        models[name] = build_model(name)

    # Which dtypes each model needs module_sizes for (those used by its cases, plus float32 and float16 always).
    dtypes_needed = {name: ["float32", "float16"] for name in MODEL_SPECS}
    raw_sizes = {name: {k: dict(compute_module_sizes(models[name][0], dtype=torch_dtype(k)))
                        for k in ["float32", "float16"]} for name in MODEL_SPECS}
    cases = make_cases(raw_sizes)
    for c in cases:
        k = dtype_key(torch_dtype(c["dtype"]) if c["dtype"] else None)
        if k not in dtypes_needed[c["model"]]:
            dtypes_needed[c["model"]].append(k)

    out_models = {}
    for name, (model, config) in models.items():
        module_sizes = {}
        for k in dtypes_needed[name]:
            module_sizes[k] = dict(compute_module_sizes(model, dtype=None if k == "none" else k))
        tensors = []
        np_bufs = set()
        for mname, m in model.named_modules():
            np_bufs |= {(mname + "." if mname else "") + b for b in m._non_persistent_buffers_set}
        param_names = {n for n, _ in model.named_parameters()}
        for tname, t in named_module_tensors(model, recurse=True):
            tensors.append({
                "name": tname,
                "kind": "param" if tname in param_names else "buffer",
                "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape),
                "persistent": tname not in np_bufs,
            })
        out_models[name] = {
            "class": type(model).__name__,
            "config": {k: v for k, v in MODEL_SPECS[name][2].items()},
            # The whole config as save_pretrained writes it (config.json), for libacc's from_config.
            "config_json": json.loads(config.to_json_string()),
            "config_class": MODEL_SPECS[name][1].__name__,
            "no_split_modules": sorted(model._no_split_modules or []),
            "tied_parameters": find_tied_parameters(model),
            "module_classes": {mname: type(m).__name__ for mname, m in model.named_modules()},
            "tensors": tensors,
            "module_sizes": module_sizes,
        }

    out_cases = []
    failures = []
    for c in cases:
        model = models[c["model"]][0]
        inputs = {
            "max_memory": pairs(c["max_memory"]),
            "no_split_module_classes": list(c["no_split"]),
            "dtype": c["dtype"],
            "offload_buffers": c["offload_buffers"],
            "fallback_allocation": c["fallback_allocation"],
        }
        rec = {
            "id": c["id"],
            "model": c["model"],
            "mode": c["mode"],
            "exercises": c["exercises"],
            "description": c["description"],
            "inputs": inputs,
        }
        if c["mode"] in ("balanced", "balanced_low_0", "auto"):
            rec["low_zero"] = c["mode"] == "balanced_low_0"
        try:
            parsed, _, _ = run_captured(lambda: get_max_memory(copy.deepcopy(c["max_memory"])))
            rec["max_memory_parsed"] = pairs(parsed)
            rec["string_budgets"] = [[k, v, convert_file_size_to_int(v)] for k, v in c["max_memory"].items()
                                     if isinstance(v, str)]
            mm_for_map = copy.deepcopy(c["max_memory"])
            if c["mode"] in ("balanced", "balanced_low_0", "auto"):
                balanced, w, logs = run_captured(lambda: get_balanced_memory(
                    model, max_memory=copy.deepcopy(c["max_memory"]), no_split_module_classes=list(c["no_split"]),
                    dtype=c["dtype"], low_zero=(c["mode"] == "balanced_low_0")))
                rec["balanced_max_memory"] = pairs(balanced)
                mm_for_map = balanced
            # Initial largest layer (what infer_auto_device_map reserves on the main devices at the start).
            sizes = compute_module_sizes(model, dtype=c["dtype"])
            top = (list(model.named_parameters(recurse=False)) + list(model.named_children())
                   + list(model.named_buffers(recurse=False)))
            mls, mln = get_max_layer_size(top, sizes, list(c["no_split"]))
            rec["max_layer"] = {"size": mls, "names": mln}
            dm, w, logs = run_captured(lambda: infer_auto_device_map(
                model, max_memory=copy.deepcopy(mm_for_map), no_split_module_classes=list(c["no_split"]),
                dtype=c["dtype"], offload_buffers=c["offload_buffers"], fallback_allocation=c["fallback_allocation"],
                verbose=False))
            dm = dict(dm)
            rec["device_map"] = dm
            rec["warnings"] = w
            rec["logs"] = logs
            if c["expect_error"]:
                failures.append(f"{c['id']}: expected an error, got a map")
            elif bool(w) != c["expect_warning"]:
                failures.append(f"{c['id']}: warnings {w} (expected: {c['expect_warning']})")
            elif c["check"] is not None and not c["check"](dm):
                failures.append(f"{c['id']}: check failed: {dm}")
        except Exception as e:  # noqa: BLE001
            if not c["expect_error"]:
                raise
            rec["error"] = {"type": type(e).__name__, "message": str(e)}
        out_cases.append(rec)

    convert = []
    for s in CONVERT_INPUTS:
        try:
            convert.append({"input": s, "bytes": convert_file_size_to_int(s)})
        except ValueError as e:
            convert.append({"input": s, "error": "ValueError", "message": str(e)})

    doc = {
        "generator": "tests/bigmodel/make_device_map_fixtures.py",
        "versions": {
            "accelerate": accelerate.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        },
        "dtype_byte_size": {k: dtype_byte_size(getattr(torch, k))
                            for k in ["float32", "float16", "bfloat16", "int64", "int32", "uint8", "bool"]},
        "models": out_models,
        "cases": out_cases,
        "convert_file_size_to_int": convert,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")
    for c in out_cases:
        dm = c.get("device_map")
        print(f"{c['id']:45s} {c.get('error', {}).get('type', '') or sorted(set(map(str, dm.values())))}"
              f" n={0 if dm is None else len(dm)} warn={len(c.get('warnings', []))} log={len(c.get('logs', []))}")
    print("wrote", OUT, os.path.getsize(OUT), "bytes")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
