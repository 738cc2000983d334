#!/usr/bin/env python3
"""Writes the seed corpora and dictionaries of the libFuzzer targets (tests/fuzz/corpus/<target>/, tests/fuzz/dict/).

usage: make_corpus.py [--check]    (--check: exit 1 when the committed files differ from what this writes)

Seeds are small valid (and a few deliberately broken) inputs:
  fuzz_accelerator_json     explicit JSON of acc_accelerator_create (docs/configuration.md's keys), written below
  fuzz_launch_yaml          Accelerate default_config.yaml files: tests/launcher/data/**/*.yaml, copied
  fuzz_launch_json          the same as JSON (converted when PyYAML is present) and tests/launcher/data/**/*.json
  fuzz_safetensors_header   safetensors files (8-byte length, header JSON, data) built here with struct/json
  fuzz_launch_args          argv of `acc launch`, one entry per NUL-separated field
  fuzz_checkpoint_json      a checkpoint's manifest.json, accelerator_state.json, scheduler and loader JSON
  fuzz_hf_folder            a model folder's config.json, a NUL, its model.safetensors.index.json: the configs of
                            tests/hf/fixtures (with the llama's index) and broken ones
  fuzz_checkpoint_folder    checkpoint folders (files, then manifest.json) in the target's input layout
  fuzz_adapter_config       adapter_config.json: tests/finetune/fixtures' (written by peft), the patterns of peft's
                            documentation, and the regular expressions that hung or crashed std::regex (issue 36)
  fuzz_param_pattern        a requires_grad / param_groups pattern, a NUL, parameter names (NUL-separated; none: the
                            target's own)
  fuzz_parallelism_sizes    the target's decisions as bytes (flags, where each size comes from, the sizes, the
                            processes), encoded below: the wrapping products of issue 36 and accepted meshes
  fuzz_profile_kwargs       acc_profile_begin's JSON: Accelerate's ProfileKwargs, bad schedules, an injection attempt
  fuzz_tokenizer            tokenizer.json, a NUL, a text: tests/text/tiny's tokenizers and small BPE ones written
                            below (look-around and catastrophic Split patterns, bad merges, a look-around Replace)
  fuzz_chat_template        a mode byte, then a chat template (even) or a conversation's messages JSON (odd): the
                            tiny byte-level BPE tokenizer's template, loops, macros, raise_exception, {% generation %}
  fuzz_parquet_footer       Parquet files: tests/data/fixtures' (snappy, zstd, gzip; several row groups), copied
  fuzz_arrow_ipc            a format byte (even: IPC stream, odd: IPC file), then the file: tests/data/fixtures' stream
                            and file, and a save_to_disk shard
Dictionaries (libFuzzer -dict=) hold the schema's key names and accepted values, read from the key tables of
docs/configuration.md (generated from the schema and checked against it by the 'docs_match_schema' test); LoraConfig's
fields read from src/models/lora.cpp; regular-expression syntax; the byte encodings of sizes near the limits.
Deterministic: running it twice writes the same files. No torch, no network.
"""
import hashlib
import json
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DATA = os.path.join(ROOT, "tests", "launcher", "data")
DOC = os.path.join(ROOT, "docs", "configuration.md")

out = {}  # relative path -> bytes


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    out[f"corpus/{target}/{name}"] = data


# --------------------------------------------------------------------------------------------------------------
# The schema, from docs/configuration.md's generated key tables.
def schema_tables():
    text = open(DOC, encoding="utf-8").read()
    tables = {}
    for kind in ("accelerator", "launch"):
        body = text.split(f"<!-- keys:{kind}:begin -->", 1)[1].split(f"<!-- keys:{kind}:end -->", 1)[0]
        rows = []
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            m = re.fullmatch(r"`([A-Za-z0-9_.]+)`", cells[0]) if cells else None
            if m:
                accepted = cells[3] if len(cells) > 3 else ""
                rows.append((m.group(1), accepted))
        tables[kind] = rows
    return tables


def tokens(rows):
    keys, values = set(), set()
    for path, accepted in rows:
        keys.update(path.split("."))
        for v in accepted.split(","):
            v = v.strip()
            if re.fullmatch(r"[A-Za-z0-9_\-]+", v) and not re.fullmatch(r"\d+", v):
                values.add(v)
    return sorted(keys), sorted(values)


def dict_line(tok):
    """A libFuzzer dictionary entry: backslash and quote escaped, other bytes outside printable ASCII as \\xNN."""
    body = ""
    for ch in tok:
        if ch in '\\"':
            body += "\\" + ch
        elif " " <= ch <= "~":
            body += ch
        else:
            body += "\\x%02X" % ord(ch)
    return '"' + body + '"'


def dictionaries(tables):
    acc_keys, acc_values = tokens(tables["accelerator"])
    launch_keys, launch_values = tokens(tables["launch"])
    common_json = ["{", "}", "[", "]", ":", ",", "true", "false", "null", "-1", "0", "1e308", "\\u0000", "\\ud800",
                   "${env:HOME}", "${env:X:-y}"]
    lines = ["# JSON tokens and the schema's keys and values (generated by make_corpus.py)"]
    lines += [dict_line(t) for t in common_json]
    lines += [dict_line('"' + k + '"') for k in sorted(set(acc_keys) | set(launch_keys))]
    lines += [dict_line('"' + v + '"') for v in sorted(set(acc_values) | set(launch_values))]
    out["dict/json.dict"] = ("\n".join(lines) + "\n").encode()

    common_yaml = [": ", "- ", "\n", "\n  ", "[]", "{}", "~", "null", "true", "false", "'no'", "\"", "&a ", "*a",
                   "<<: ", "!!str ", "!!binary ", "--- ", "...", "|\n", ">\n", "? ", "%YAML 1.2\n", "${env:HOME}"]
    lines = ["# YAML tokens and the launch schema's keys (with Accelerate's spellings) and values (make_corpus.py)"]
    lines += [dict_line(t) for t in common_yaml]
    lines += [dict_line(k + ": ") for k in launch_keys]
    lines += [dict_line(v) for v in launch_values]
    out["dict/yaml.dict"] = ("\n".join(lines) + "\n").encode()

    # launcher flags: every launch-schema key as --key, and what launch.cpp declares besides
    src = open(os.path.join(ROOT, "launcher", "launch.cpp"), encoding="utf-8").read()
    flags = set(re.findall(r'"(--[a-z][a-z0-9_]*)"', src)) | {"--" + k for k in launch_keys}
    lines = ["# `acc launch` options and values; argv entries are separated by NUL (make_corpus.py)"]
    lines += [dict_line(t) for t in ["\0", "--", "=", "-h", "-q", "-m", "true", "false", "-1", "0", "4"]]
    lines += [dict_line(f) for f in sorted(flags)]
    lines += [dict_line(v) for v in launch_values]
    out["dict/args.dict"] = ("\n".join(lines) + "\n").encode()

    # config.json's keys and values as base/src/hf_shapes.cpp reads them
    src = open(os.path.join(ROOT, "base", "src", "hf_shapes.cpp"), encoding="utf-8").read()
    hf_keys = set(re.findall(r'"([a-z][a-z0-9_]*)"', src)) - {"default"}
    lines = ["# config.json and model.safetensors.index.json keys and values (make_corpus.py)"]
    lines += [dict_line(t) for t in ["{", "}", "[", "]", ":", ",", "\0", "true", "false", "null", "-1", "0", "0.5",
                                     "1e-06", "65536", "2147483648", "\"../", "\"default\"", "\"linear\"",
                                     "\"dynamic\"", "\"llama3\"", "\"yarn\"", "\"weight_map\"",
                                     "\"model-00001-of-00002.safetensors\""]]
    lines += [dict_line('"' + k + '"') for k in sorted(hf_keys)]
    out["dict/hf.dict"] = ("\n".join(lines) + "\n").encode()

    # regular-expression syntax: RE2's, Python re's it refuses (backreferences, lookaround), and repetition limits
    regex = ["(", ")", "|", ".", "*", "+", "?", ".*", ".*?", "\\.", "^", "$", "(?:", "(?i)", "(?s)", "(?m)",
             "(?P<n>", "(?<n>", "\\d+", "\\d", "\\w", "\\s", "\\b", "\\B", "\\A", "\\z", "[", "]", "[^.]",
             "[a-z]", "{2}", "{2,}", "{0,1000}", "{1001}", "\\1", "(?=", "(?!", "(?<=", "(?<!", "\\Q", "\\E",
             "\\pL", "\\p{Greek}", "[[:alpha:]]", "\\C", "\\x{10FFFF}", "\\x00", "\\", "(.|.)*",
             "((((((((", "))))))))"]
    names = ["model", "layers", "self_attn", "q_proj", "k_proj", "v_proj", "o_proj", "mlp", "gate_proj", "up_proj",
             "down_proj", "lm_head", "embed_tokens", "norm", "transformer", "h", "attn", "c_attn", "c_proj", "c_fc",
             "weight", "bias", "lora_A", "lora_B", "0", "1", "classifier", "score"]
    src = open(os.path.join(ROOT, "src", "models", "lora.cpp"), encoding="utf-8").read()
    lora_keys = sorted(set(re.findall(r'key == "([a-z_]+)"', src)) | set(re.findall(r'\{"([a-z_]+)", \{"', src)))
    json_tokens = ["{", "}", "[", "]", ":", ",", "true", "false", "null", "-1", "0", "\\u0000", "\\\\"]
    lines = ["# adapter_config.json: LoraConfig's fields (src/models/lora.cpp), JSON and regular expressions "
             "(make_corpus.py)"]
    lines += [dict_line(t) for t in json_tokens + ["\"all-linear\"", "\"LORA\"", "\"CAUSAL_LM\"", "\"gaussian\""]]
    lines += [dict_line('"' + k + '"') for k in lora_keys]
    lines += [dict_line(t.replace("\\", "\\\\")) for t in regex]  # inside a JSON string, a backslash is escaped
    lines += [dict_line(n) for n in names]
    out["dict/adapter.dict"] = ("\n".join(lines) + "\n").encode()
    lines = ["# regular expressions (RE2's syntax and what it refuses) and parameter names, NUL between names "
             "(make_corpus.py)"]
    lines += [dict_line(t) for t in regex + ["\0"]]
    lines += [dict_line(n) for n in names]
    out["dict/pattern.dict"] = ("\n".join(lines) + "\n").encode()

    # fuzz_parallelism_sizes reads bytes: the 8-byte little-endian forms of sizes near the limits
    near = [1, 2, 65535, 65536, 65537, 2**31 - 1, 2**31, 2**32, 3037000500, 6148914691236517205, 2**62, 2**63 - 1,
            2**63, 2**64 - 1]
    lines = ["# sizes as 8 little-endian bytes (fuzz_parallelism_sizes decodes its input; make_corpus.py)"]
    lines += [dict_line(struct.pack("<Q", v).decode("latin-1")) for v in near]
    out["dict/parallelism.dict"] = ("\n".join(lines) + "\n").encode()

    # profile_kwargs: the schema's keys under it, torch.profiler.schedule's arguments, the activities
    profile_keys = sorted({p.split(".", 1)[1] for p, _ in tables["accelerator"] if p.startswith("profile_kwargs.")})
    lines = ["# profile_kwargs' keys, schedule_option's arguments and the activities (make_corpus.py)"]
    lines += [dict_line(t) for t in json_tokens + ["2147483647", "2147483648", "9223372036854775807", "1e300", "1.0"]]
    lines += [dict_line('"' + k + '"') for k in profile_keys + ["wait", "warmup", "active", "repeat", "skip_first",
                                                               "skip_first_wait", "cpu", "cuda", "xpu", "mtia", "hpu",
                                                               "profile_kwargs", "seed"]]
    out["dict/profile.dict"] = ("\n".join(lines) + "\n").encode()


# --------------------------------------------------------------------------------------------------------------
def accelerator_seeds():
    seeds = {
        "empty.json": "",
        "object.json": "{}",
        "seed.json": {"seed": 42},
        "mixed.json": {"mixed_precision": "bf16", "gradient_accumulation_steps": 4, "cpu": True},
        "dataloader.json": {"dataloader_config": {"split_batches": False, "dispatch_batches": None,
                                                  "even_batches": True, "use_seedable_sampler": True,
                                                  "data_seed": 7, "non_blocking": False}},
        "project.json": {"project_config": {"project_dir": "out/run", "logging_dir": "logs",
                                            "automatic_checkpoint_naming": True, "total_limit": 2,
                                            "iteration": 0}, "log_with": ["tensorboard"]},
        "ddp.json": {"ddp_kwargs": {"bucket_cap_mb": 25.5, "find_unused_parameters": True,
                                    "comm_hook": "power_sgd", "comm_wrapper": "no",
                                    "comm_state_option": {"matrix_approximation_rank": 2}},
                     "grad_scaler_kwargs": {"init_scale": 1024.0, "growth_interval": 100}},
        "fsdp.json": {"use_fsdp": True, "fsdp_plugin": {"fsdp_version": 2, "sharding_strategy": "FULL_SHARD",
                                                        "reshard_after_forward": True,
                                                        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                                        "transformer_cls_names_to_wrap": ["Block"],
                                                        "mixed_precision_policy": {"param_dtype": "bfloat16"},
                                                        "cpu_offload": False}},
        "deepspeed.json": {"use_deepspeed": True, "deepspeed_plugin": {"zero_stage": 3, "gradient_clipping": 1.0,
                                                                       "offload_optimizer_device": "cpu"}},
        "dynamo.json": {"dynamo_plugin": {"backend": "INDUCTOR", "mode": "max-autotune", "dynamic": None,
                                          "options": {"a": [1, 2.5, "x", None, True]}}},
        "fp8.json": {"mixed_precision": "fp8", "fp8_recipe_kwargs": {"fp8_format": "E4M3", "margin": 0,
                                                                     "override_linear_precision": [False, True, False]}},
        "parallelism.json": {"use_parallelism_config": True, "parallelism_config": {"dp_shard_size": 2, "tp_size": 2}},
        "init.json": {"init_process_group_kwargs": {"backend": "gloo", "init_method": "env://", "timeout": 1800},
                      "profile_kwargs": {"activities": ["cpu"], "schedule_option": {"wait": 1}}},
        "env_ref.json": {"project_dir": "${env:HOME:-/tmp}/run", "seed": 1},
        "provenance.json": {"config": {"mixed_precision": "fp16", "gradient_accumulation_steps": 4},
                            "provenance": {"mixed_precision": {"origin": "env",
                                                               "where": "ACCELERATE_MIXED_PRECISION"}}},
        "unicode.json": '{"project_dir": "r\\u00e9sum\\u00e9 \\ud83d\\ude00", "seed": -0}',
        "numbers.json": '{"ddp_kwargs": {"bucket_cap_mb": 1e2, "dim": -1}, "seed": 9223372036854775807}',
        "typo.json": {"mixed_precison": "fp16"},
        "duplicate.json": '{"seed": 1, "seed": 2}',
        "trailing.json": '{"seed": 1,}',
    }
    for name, v in seeds.items():
        put("fuzz_accelerator_json", name, v if isinstance(v, str) else json.dumps(v, indent=1))


def launch_seeds():
    files = []
    for sub in ("", "accelerate", "bad"):
        d = os.path.join(DATA, sub)
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if os.path.isfile(p) and name.endswith((".yaml", ".json")):
                files.append((("" if not sub else sub + "_") + name, open(p, "rb").read()))
    try:
        import yaml  # optional: JSON twins of the YAML seeds
    except ImportError:
        yaml = None
        print("make_corpus: PyYAML not found: the JSON twins of the YAML seeds are not written", file=sys.stderr)
    for name, data in files:
        if name.endswith(".yaml"):
            put("fuzz_launch_yaml", name, data)
            if yaml is not None:
                try:
                    obj = yaml.safe_load(data)
                    text = json.dumps(obj, indent=2, sort_keys=False, default=str)
                except Exception:
                    continue
                if len(text) > 16384:  # an alias bomb expanded: no seed
                    continue
                put("fuzz_launch_json", name[:-5] + ".json", text)
        else:
            put("fuzz_launch_json", name, data)
            put("fuzz_launch_yaml", name[:-5] + "_as.yaml", data)  # JSON is YAML too


def safetensors(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode() if not isinstance(header, bytes) else header
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    seeds = {
        "empty_object.safetensors": safetensors({}),
        "metadata.safetensors": safetensors({"__metadata__": {"format": "pt", "note": "x"}}),
        "one_f32.safetensors": safetensors({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, f32),
        "scalar.safetensors": safetensors({"s": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}}, b"\0\0"),
        "zero_dim.safetensors": safetensors({"z": {"dtype": "I64", "shape": [0, 5], "data_offsets": [0, 0]}}),
        "model.safetensors": safetensors({
            "__metadata__": {"format": "pt"},
            "embed.weight": {"dtype": "F16", "shape": [4, 2], "data_offsets": [0, 16]},
            "ln.bias": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]},
            "mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [24, 27]},
            "ids": {"dtype": "U8", "shape": [1], "data_offsets": [27, 28]},
            "fp8": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [28, 32]},
        }, bytes(32)),
        "all_dtypes.safetensors": safetensors({
            f"t{i}": {"dtype": dt, "shape": [1], "data_offsets": [8 * i, 8 * i + size]}
            for i, (dt, size) in enumerate([("F64", 8), ("F32", 4), ("F16", 2), ("BF16", 2), ("F8_E5M2", 1),
                                            ("I64", 8), ("I32", 4), ("I16", 2), ("I8", 1), ("U64", 8),
                                            ("U32", 4), ("U16", 2), ("BOOL", 1)])}, bytes(8 * 13)),
        "bad_offsets.safetensors": safetensors({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(8)),
        "bad_dtype.safetensors": safetensors({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, bytes(16)),
        "huge_shape.safetensors": safetensors({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],
                                                     "data_offsets": [0, 0]}}),
        "length_too_big.safetensors": struct.pack("<Q", 1 << 40) + b"{}",
        "short.safetensors": b"\x02\0\0",
        "unpadded.safetensors": safetensors({"a": {"dtype": "U16", "shape": [1], "data_offsets": [0, 2]}}, b"xy",
                                            pad=False),
    }
    for name, data in seeds.items():
        put("fuzz_safetensors_header", name, data)


def checkpoint_seeds():
    # As src/checkpoint/state.cpp writes them (format "libacc-checkpoint", version 1).
    seeds = {
        "manifest.json": {"format": "libacc-checkpoint", "version": 1, "num_processes": 2,
                          "files": {"model.safetensors": 4096, "optimizer.safetensors": 8192, "optimizer.json": 310,
                                    "accelerator_state.json": 180, "random_states_0.json": 5000}},
        "accelerator_state.json": {"format": "libacc-checkpoint", "version": 1, "models": 1, "optimizers": 1,
                                   "schedulers": 1, "dataloaders": 1, "custom_objects": 0, "num_processes": 2,
                                   "step": 120, "iteration": 3},
        "scheduler.json": {"step_count": 120, "steps": 120, "last_lr": [0.0003]},
        "dataloader.json": {"epoch": 1, "batches_seen": 17, "seed": 42, "sampler": {"generator": [1, 2, 3]}},
        "wrong_types.json": {"format": 1, "version": "1", "files": {"a": "big"}, "models": 1.5},
    }
    for name, doc in seeds.items():
        put("fuzz_checkpoint_json", name, json.dumps(doc, indent=1).encode())
    put("fuzz_checkpoint_json", "not_an_object.json", b"[1, 2, 3]")

    # fuzz_checkpoint_folder's layout: a count, each file as (name length, name, 2-byte content length, content),
    # then manifest.json.
    def folder(files, manifest=None):
        blob = bytes([len(files)])
        for name, content in files.items():
            blob += bytes([len(name)]) + name.encode() + struct.pack("<H", len(content)) + content
        if manifest is None:
            manifest = {"format": "libacc-checkpoint", "version": 1, "num_processes": 1,
                        "files": {name: len(content) for name, content in files.items()}}
        return blob + json.dumps(manifest).encode()

    state = json.dumps({"step": 3, "num_processes": 1, "mixed_precision": "no", "models": 1, "optimizers": 0,
                        "schedulers": 0, "dataloaders": 0, "custom_objects": 0}).encode()
    weights = safetensors({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    complete = {"accelerator_state.json": state, "model.safetensors": weights}
    folders = {
        "complete": folder(complete),
        "truncated": folder(complete, {"format": "libacc-checkpoint", "version": 1,
                                       "files": {"model.safetensors": len(weights) + 1}}),
        "outside": folder({}, {"format": "libacc-checkpoint", "version": 1, "files": {"../x": 1, "/etc/passwd": 1}}),
        "foreign": folder({"a.json": b"{}"}, {"format": "other", "version": 1, "files": {"a.json": 2}}),
        "missing": folder({}, {"format": "libacc-checkpoint", "version": 1, "files": {"model.safetensors": 8}}),
    }
    for name, data in folders.items():
        put("fuzz_checkpoint_folder", name, data)


def hf_seeds():
    # fuzz_hf_folder's layout: config.json, then a NUL and the index when the folder has one.
    fixtures = os.path.join(ROOT, "tests", "hf", "fixtures")
    llama = None
    for name in sorted(os.listdir(fixtures)):
        model = os.path.join(fixtures, name, "model")
        if not os.path.isdir(model):
            continue
        data = open(os.path.join(model, "config.json"), "rb").read()
        index = os.path.join(model, "model.safetensors.index.json")
        if os.path.exists(index):
            data += b"\0" + open(index, "rb").read()
        if name == "llama":
            llama = json.loads(open(os.path.join(model, "config.json"), encoding="utf-8").read())
        put("fuzz_hf_folder", name, data)
    small = {"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16,
             "num_hidden_layers": 1, "num_attention_heads": 2}
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                            "lm_head.weight": "model-00002-of-00002.safetensors"}}
    broken = {
        "negative_eps": (dict(small, rms_norm_eps=-1e-6), None),
        "rope_string": (dict(small, rope_parameters="linear"), None),
        "rope_factor_zero": (dict(small, rope_parameters={"rope_type": "linear", "factor": 0}), None),
        "layers_1e6": (dict(small, num_hidden_layers=1000000), None),
        "mixtral": (dict(small, architectures=["MixtralForCausalLM"], num_local_experts=4, num_experts_per_tok=2),
                    index),
        "shard_outside": (small, {"weight_map": {"lm_head.weight": "../model.safetensors"}}),
    }
    for name, (config, idx) in broken.items():
        data = json.dumps(config, indent=1).encode()
        if idx is not None:
            data += b"\0" + json.dumps(idx, indent=1).encode()
        put("fuzz_hf_folder", name, data)
    text = json.dumps(small)
    put("fuzz_hf_folder", "duplicate_key", (text[:-1] + ', "hidden_size": 16}').encode())
    put("fuzz_hf_folder", "trailing", (text + " x").encode())
    put("fuzz_hf_folder", "index_duplicate", text.encode() + b'\0{"weight_map": {"a": "x", "a": "y"}}')
    if llama:
        put("fuzz_hf_folder", "llama_rope_scaling",
            json.dumps(dict(llama, rope_scaling={"type": "dynamic", "factor": 2.0}, rope_theta=500000.0)).encode())


def args_seeds():
    seeds = {
        "plain": ["train.py"],
        "np": ["--num_processes", "2", "./train", "--steps", "3"],
        "dash_spelling": ["--num-processes=4", "--mixed-precision", "bf16", "--", "./train"],
        "cpu": ["--cpu", "--num_processes", "3", "--num_cpu_threads_per_process", "2", "prog"],
        "multi_gpu": ["--multi_gpu", "--gpu_ids", "0,1", "--num_processes", "2", "prog"],
        "machines": ["--num_machines", "2", "--machine_rank", "1", "--main_process_ip", "10.0.0.1",
                     "--main_process_port", "29500", "--num_processes", "4", "--same_network", "prog"],
        "fsdp": ["--use_fsdp", "--fsdp_version", "2", "--fsdp_sharding_strategy", "FULL_SHARD",
                 "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap",
                 "Block", "--num_processes", "2", "prog"],
        "deepspeed": ["--use_deepspeed", "--zero_stage", "3", "--offload_optimizer_device", "cpu",
                      "--gradient_clipping", "1.0", "--num_processes", "2", "prog"],
        "dynamo": ["--dynamo_backend", "inductor", "--dynamo_mode", "max-autotune", "--dynamo_use_fullgraph",
                   "prog"],
        "supervision": ["--max_restarts", "3", "--monitor_interval", "0.5", "--term_timeout", "2", "--tee", "3",
                        "--log_dir", "logs", "--role", "worker", "-q", "prog"],
        "rdzv": ["--rdzv_backend", "c10d", "--rdzv_conf", "join_timeout=60,heartbeat_timeout=5", "prog"],
        "module": ["-m", "--module", "pkg.mod", "a", "--b"],
        "flag_false": ["--debug=false", "--enable_cpu_affinity=true", "prog"],
        "scheduler": ["--scheduler", "slurm", "prog"],
        "contradict": ["--cpu", "--multi_gpu", "prog"],
        "unknown": ["--num_proceses", "2", "prog"],
        "missing_value": ["--num_processes"],
        "fp8": ["--mixed_precision", "fp8", "--fp8_backend", "te", "prog"],
        "parallelism": ["--use_fsdp", "--fsdp_version", "2", "--use_parallelism_config", "--parallelism_config_tp_size",
                        "2", "--num_processes", "2", "prog"],
    }
    for name, argv in seeds.items():
        put("fuzz_launch_args", name, b"\0".join(a.encode() for a in argv))


def adapter_seeds():
    fixtures = os.path.join(ROOT, "tests", "finetune", "fixtures")
    for name in sorted(os.listdir(fixtures)):
        path = os.path.join(fixtures, name, "adapter_config.json")
        if os.path.exists(path):
            put("fuzz_adapter_config", name + ".json", open(path, "rb").read())
    base = {"r": 4, "lora_alpha": 8}
    nested = "(" * 2000 + "q_proj" + ")" * 2000  # 4006 bytes: within the string limit, past RE2's nesting limit
    seeds = {
        # peft's documentation and tests/cpp/test_lora.cpp's documented patterns
        "doc_regex.json": {"target_modules": ".*\\.(q_proj|v_proj)"},
        "doc_anchored.json": {"target_modules": "^.*(q|k|v)_proj$"},
        "doc_layer_regex.json": {"target_modules": "model.*\\.layers\\.1\\..*(k|v)_proj"},
        "doc_layers_pattern.json": {"target_modules": ["q_proj"], "layers_to_transform": [1], "layers_pattern": "layers"},
        "doc_rank_pattern.json": {"target_modules": ["q_proj", "v_proj"],
                                  "rank_pattern": {"^model.layers.0.self_attn.q_proj": 2,
                                                   "layers\\.1\\.self_attn\\.(q|v)_proj": 6},
                                  "alpha_pattern": {"v_proj": 16}},
        "doc_exclude.json": {"target_modules": "all-linear", "exclude_modules": ".*mlp.*"},
        "doc_modules_to_save.json": {"target_modules": ["c_attn"], "modules_to_save": ["classifier", "score"]},
        # issue 36: std::regex hung on these or overflowed its stack
        "backtracking.json": {"target_modules": "(.|.)*x"},
        "backtracking_rank.json": {"target_modules": ["q_proj"], "rank_pattern": {"(.|.)*x": 2}},
        "nested_groups.json": {"target_modules": nested},
        # what RE2 refuses, named: backreferences, lookaround, repetition past 1000, a pattern past 4096 bytes
        "backreference.json": {"target_modules": "(q)_\\1"},
        "lookahead.json": {"target_modules": "q_proj(?=x)", "exclude_modules": "(?<!x)v_proj"},
        "repetition.json": {"target_modules": "((a{100}){100}){100}"},
        "too_long.json": {"target_modules": "a" * 4097},
        # accepted when read, but wrapped when used: \Q quotes the closing parenthesis
        "quoted_rank_key.json": {"target_modules": ["q_proj"], "rank_pattern": {"\\Qq_proj": 4}},
        "layers_pattern_group.json": {"target_modules": ["q_proj"], "layers_to_transform": [0],
                                      "layers_pattern": ["(layers)", "h"]},
        "modules_to_save_regex.json": {"target_modules": ["q_proj"], "modules_to_save": ["lm_(head", ".*"]},
        "wrong_types.json": {"target_modules": 3, "rank_pattern": [1], "layers_pattern": {"a": 1}},
    }
    for name, doc in seeds.items():
        put("fuzz_adapter_config", name, json.dumps(dict(base, **doc), indent=1))
    put("fuzz_adapter_config", "not_an_object.json", "[\"q_proj\"]")
    put("fuzz_adapter_config", "duplicate.json", '{"target_modules": "q_proj", "target_modules": ".*"}')


def pattern_seeds():
    names = [".*", ".*lora_.*", ".*\\.(q|v)_proj\\.weight", "model\\.layers\\.[01]\\..*", ".*bias", "lm_head\\.weight",
             "transformer\\.h\\.\\d+\\.attn\\..*", "(?i)MODEL.*NORM.*", "(?P<layer>model\\.layers\\.\\d+)\\..*",
             "\\pL+(\\.\\pL+)*", "fc[12]\\.(weight|bias)"]
    seeds = {"doc_%d" % i: p.encode() for i, p in enumerate(names)}
    seeds.update({
        # issue 36: std::regex hung (catastrophic backtracking) or overflowed its stack (nested groups)
        "backtracking": b"(.|.)*x",
        "backtracking_long_name": b"(a|a)*b\0" + b"a" * 2000,
        "nested_groups": b"(" * 2000 + b"x" + b")" * 2000,
        # refused: a backreference, lookaround, a repetition past 1000, an unbalanced group, too long, not UTF-8
        "backreference": b"(model)\\.\\1",
        "lookaround": b"(?=model).*(?<!bias)",
        "repetition": b"a{1001}",
        "unbalanced": b"model.(layers",
        "too_long": b"a" * 4097,
        "not_utf8": b"model\xff.*",
        "empty": b"",
        # the caller's own names
        "names": b"lm_head\\.(weight|bias)\0lm_head.weight\0lm_head.bias\0\0x" + "é".encode() + b"\0" + b"w" * 300,
        "quoted": b"\\Qmodel.layers\0model.layers\0modelxlayers",
    })
    for name, data in seeds.items():
        put("fuzz_param_pattern", name, data)


def parallelism_input(flags=0, where=0, sizes=(), world=None, machines=0, local=0):
    """fuzz_parallelism_sizes' input. sizes: 5 entries, each None (absent), an int 1..8 (tag 8), ("near", index),
    ("raw", int64), ("odd", index); world: None (the product of the sizes), ("small", n), ("raw", uint64)."""
    b = bytes([flags, where])
    for sz in list(sizes) + [None] * (5 - len(sizes)):
        if sz is None:
            b += bytes([0])
        elif isinstance(sz, int):
            b += bytes([8, sz - 1])
        elif sz[0] == "near":
            b += bytes([4, sz[1]])
        elif sz[0] == "raw":
            b += bytes([5]) + struct.pack("<q", sz[1])
        else:
            b += bytes([7, sz[1]])
    if world is None:
        b += bytes([0])
    elif world[0] == "small":
        b += bytes([1, world[1] - 1])
    else:
        b += bytes([3]) + struct.pack("<Q", world[1])
    return b + bytes([machines, local])


def parallelism_seeds():
    # kNear's indices in fuzz_parallelism_sizes.cpp: 0 -> 0, 1 -> -1, 4 -> 65536, 15 -> 6148914691236517205,
    # 16 -> 2^62, 17 -> 2^63-1, 19 -> 2^63; kOdd's: 11 -> "2x", 12 -> " 2", 14 -> "+2"
    max_ = ("near", 17)
    seeds = {
        "accepted_hsdp": parallelism_input(sizes=[2, 2]),                         # FSDP2, 2 x 2 over 4 processes
        "accepted_tp": parallelism_input(sizes=[None, 2, 2, None, None]),
        "accepted_cp": parallelism_input(sizes=[None, 2, None, 2, None]),
        # (dp_shard_size 2: FSDP 2 shards, so the sizes reach the product's check)
        "wrap_square": parallelism_input(sizes=[max_, 2, max_], world=("small", 2)),  # 2^63-1 squared: 1
        "wrap_zero": parallelism_input(sizes=[("near", 16), 2, 4], world=("small", 8)),  # 2^62 x 2 x 4: 0
        "wrap_minus_one": parallelism_input(sizes=[3, 2, ("near", 15)], world=("small", 6)),
        "wrap_without_fsdp": parallelism_input(flags=2, sizes=[max_, None, max_], world=("small", 1)),
        "env_square": parallelism_input(flags=8, where=0b101, sizes=[max_, 2, max_], world=("small", 2)),
        "flags_square": parallelism_input(where=0b11111, sizes=[max_, max_, 2, 2, 1], world=("small", 4)),
        "past_int64": parallelism_input(where=0b00001, sizes=[("near", 19)], world=("small", 2)),
        "sequence": parallelism_input(sizes=[max_, 2, max_, None, 2], world=("small", 2)),
        "sequence_accepted": parallelism_input(sizes=[None, 2, None, None, 4], world=("small", 2)),
        "zero_minus": parallelism_input(sizes=[("near", 0), ("near", 1)], world=("small", 1)),
        "odd_text": parallelism_input(where=0b111, sizes=[("odd", 11), ("odd", 12), ("odd", 14)]),
        "at_limit": parallelism_input(sizes=[None, ("near", 4)], world=None),
        "no_fsdp": parallelism_input(flags=2 | 4, sizes=[2, 2], world=("small", 4), machines=1, local=1),
        "machines": parallelism_input(sizes=[2, 4], machines=1, local=3),
        "raw_world": parallelism_input(sizes=[2, 2], world=("raw", 2**64 - 4)),
    }
    for name, data in seeds.items():
        put("fuzz_parallelism_sizes", name, data)


def profile_seeds():
    seeds = {
        "accelerate_doc.json": {"activities": ["cpu"], "record_shapes": True},
        "schedule.json": {"schedule_option": {"wait": 1, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 1}},
        "all_flags.json": {"activities": ["cpu", "cuda"], "record_shapes": True, "profile_memory": True,
                           "with_stack": True, "with_flops": True, "with_modules": True, "output_trace_dir": "traces"},
        "skip_first_wait.json": {"schedule_option": {"wait": 2, "warmup": 0, "active": 1, "skip_first": 3,
                                                     "skip_first_wait": 1}},
        "schedule_past_int32.json": {"schedule_option": {"wait": 2147483647, "warmup": 2147483647,
                                                         "active": 2147483648}},
        "schedule_int64.json": {"schedule_option": {"wait": 9223372036854775807, "warmup": 1, "active": 1}},
        "schedule_negative.json": {"schedule_option": {"wait": -1, "warmup": 0, "active": 0}},
        "schedule_missing.json": {"schedule_option": {"wait": 1}},
        "schedule_unknown.json": {"schedule_option": {"wait": 1, "warmup": 1, "active": 1, "cycles": 2}},
        "schedule_floats.json": {"schedule_option": {"wait": 1.0, "warmup": 1e0, "active": 2.5}},
        "schedule_list.json": {"schedule_option": [1, 1, 1]},
        "activities_empty.json": {"activities": []},
        "activities_unknown.json": {"activities": ["tpu"]},
        "output_empty.json": {"output_trace_dir": ""},
        "typo.json": {"activites": ["cpu"]},
        "empty.json": {},
    }
    for name, doc in seeds.items():
        put("fuzz_profile_kwargs", name, json.dumps(doc, indent=1))
    put("fuzz_profile_kwargs", "injection.json", '{"record_shapes": true}, "seed": 7, "x": {}')
    put("fuzz_profile_kwargs", "injection_brace.json", '{"record_shapes": true}}, {"seed": 7')
    put("fuzz_profile_kwargs", "not_an_object.json", '["cpu"]')
    put("fuzz_profile_kwargs", "nothing.json", "")


# --------------------------------------------------------------------------------------------------------------
# Issue 37's text library: tokenizer.json files with a text (fuzz_tokenizer), chat templates and conversations
# (fuzz_chat_template), and their dictionaries.
TINY = os.path.join(ROOT, "tests", "text", "tiny")


def small_bpe(pre_tokenizer=None, normalizer=None, vocab=None, merges=None, **model):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab if vocab is not None else {"a": 0, "b": 1, "ab": 2, " ": 3},
         "merges": merges if merges is not None else [["a", "b"]]}
    m.update(model)
    return json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                       "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": None,
                       "decoder": None, "model": m}, separators=(",", ":"))


def text_seeds():
    sample = "Hello world! 12 caf\u00e9s, <|im_start|> \u4f60\u597d  \n\tend".encode().decode("unicode_escape")
    for name in ("bytebpe", "spbpe", "unigram", "wordpiece"):
        tj = open(os.path.join(TINY, name, "tokenizer.json"), "rb").read()
        put("fuzz_tokenizer", f"tiny_{name}", tj + b"\0" + sample.encode())
    split = {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\w+"}, "behavior": "Isolated", "invert": False}
    put("fuzz_tokenizer", "bpe_small", small_bpe() + "\0abab ba")
    put("fuzz_tokenizer", "bpe_split_lookaround", small_bpe(split) + "\0ab  ab   ba")
    put("fuzz_tokenizer", "bpe_catastrophic", small_bpe(dict(split, pattern={"Regex": "(a+)+(?!a)b"})) + "\0" + "a" * 64)
    put("fuzz_tokenizer", "bpe_prefix", small_bpe(continuing_subword_prefix="##",
                                                   vocab={"a": 0, "##b": 1, "ab": 2}, merges=[["a", "##b"]]) + "\0ab")
    put("fuzz_tokenizer", "bpe_merge_missing", small_bpe(vocab={"a": 0, "b": 1}) + "\0ab")
    put("fuzz_tokenizer", "replace_lookaround", small_bpe(normalizer={
        "type": "Replace", "pattern": {"Regex": "a(?=b)"}, "content": "x"}) + "\0ab")
    put("fuzz_tokenizer", "wordlevel", json.dumps({"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1},
                                                             "unk_token": "[UNK]"},
                                                   "pre_tokenizer": {"type": "Whitespace"}}) + "\0a b a")
    put("fuzz_tokenizer", "unknown_model", '{"model":{"type":"Quantum"}}\0x')
    put("fuzz_tokenizer", "deep", "[" * 200 + "\0x")
    put("fuzz_tokenizer", "bad_utf8", small_bpe().encode() + b"\0ab\xc3(")

    config = json.load(open(os.path.join(TINY, "bytebpe", "tokenizer_config.json"), encoding="utf-8"))
    templates = {
        "bytebpe": config["chat_template"],
        "loop": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
        "macro": "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
        "raise": "{% if messages | length > 1 %}{{ raise_exception('too many') }}{% endif %}",
        "methods": "{{ messages[0].content.strip().upper().split(' ') | tojson }}{{ 'x' * 3 }}"
                   "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "generation": "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
        "nested_loop": "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
        "repeat": "{{ 'x' * 10**9 }}",
        "syntax": "{% for m in messages %}\n{% if %}",
        "strftime": "{{ strftime_now('%Y-%m-%d') }}{{ bos_token }}{{ eos_token }}",
    }
    for name, t in templates.items():
        put("fuzz_chat_template", "template_" + name, b"\0" + t.encode())
    conversations = {
        "plain": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
        "tool": [{"role": "user", "content": "Weather?"},
                 {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                     "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                 {"role": "tool", "content": "sunny"}],
        "bad_role": [{"role": "wizard", "content": "x"}],
        "generation_marks": [{"role": "user", "content": "\ufdd0"}],
    }
    for name, conv in conversations.items():
        for mode in (1, 3, 5, 9):
            put("fuzz_chat_template", f"messages_{name}_{mode}", bytes([mode]) + json.dumps(conv).encode())
    put("fuzz_chat_template", "messages_not_json", b"\x01[[[[")

    lines = ["# tokenizer.json: the keys and type names of the tokenizers crate's files, regular-expression syntax, "
             "text (make_corpus.py)"]
    words = ["{", "}", "[", "]", ":", ",", "true", "false", "null", "\0", "\"type\"", "\"model\"", "\"vocab\"",
             "\"merges\"", "\"normalizer\"", "\"pre_tokenizer\"", "\"post_processor\"", "\"decoder\"",
             "\"added_tokens\"", "\"pattern\"", "\"Regex\"", "\"String\"", "\"behavior\"", "\"invert\"",
             "\"content\"", "\"special\"", "\"id\"", "\"unk_token\"", "\"unk_id\"",
             "\"continuing_subword_prefix\"", "\"byte_fallback\"", "\"single\"", "\"pair\"",
             "\"SpecialToken\"", "\"Sequence\"", "\"special_tokens\"", "\"ids\"", "\"tokens\""]
    words += ['"' + t + '"' for t in ("BPE", "WordPiece", "WordLevel", "Unigram", "Split", "ByteLevel", "Metaspace",
                                     "Whitespace", "WhitespaceSplit", "Punctuation", "Digits", "BertPreTokenizer",
                                     "Replace", "NFC", "NFKC", "NFD", "Lowercase", "Strip", "Prepend", "ByteFallback",
                                     "Fuse", "TemplateProcessing", "BertProcessing", "RobertaProcessing",
                                     "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")]
    words += ["(?=", "(?!", "(?<=", "(?<!", "\\\\s", "\\\\S", "\\\\p{L}", "+", "*", "\\\\1", " ", "\u00e9",
              "\u2581", "<|im_start|>", "##"]
    lines += [dict_line(w.encode().decode("latin-1")) for w in words]
    out["dict/tokenizer.dict"] = ("\n".join(lines) + "\n").encode()
    lines = ["# chat templates (Jinja as minijinja and transformers take it) and conversations' JSON (make_corpus.py)"]
    words = ["{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "for ", " in ", "endfor", "if ", "elif", "else",
             "endif", "set ", "endset", "macro ", "endmacro", "call", "endcall", "filter ", "endfilter",
             "generation", "endgeneration", "namespace(", "range(", "loop.index", "loop.last", "messages",
             "message['content']", "raise_exception(", "strftime_now(", "tojson", "| length", " ~ ", " * ", "**",
             "'x'", "bos_token", "eos_token", "add_generation_prompt", "tools", ".strip()", ".split(", ".items()",
             "\"role\"", "\"content\"", "\"user\"", "\"assistant\"", "\"system\"", "\"tool\"",
             "\"tool_calls\"", "\"function\"", "\"arguments\"", "\ufdd0", "\ufdd1"]
    lines += [dict_line(w.encode().decode("latin-1")) for w in words]
    out["dict/jinja.dict"] = ("\n".join(lines) + "\n").encode()


# Issue 39's dataset files: the committed fixtures of tests/data (made by tests/data/make_fixtures.py with pyarrow and
# datasets), and the tokens of their metadata.
def data_seeds():
    fixtures = os.path.join(ROOT, "tests", "data", "fixtures")
    for codec in ("snappy", "zstd", "gzip"):
        put("fuzz_parquet_footer", codec, open(os.path.join(fixtures, f"rows.{codec}.parquet"), "rb").read())
    put("fuzz_arrow_ipc", "stream", b"\0" + open(os.path.join(fixtures, "rows.stream.arrow"), "rb").read())
    put("fuzz_arrow_ipc", "file", b"\1" + open(os.path.join(fixtures, "rows.file.arrow"), "rb").read())
    shard = os.path.join(fixtures, "saved", "data-00000-of-00002.arrow")
    put("fuzz_arrow_ipc", "saved_shard", b"\0" + open(shard, "rb").read())
    sizes = ['"\\x00\\x00\\x00\\x00"', '"\\xff\\xff\\xff\\x7f"', '"\\xff\\xff\\xff\\xff"', '"\\x00\\x00\\x00\\x80"']
    out["dict/parquet.dict"] = ("# Parquet's magic, thrift compact field headers, sizes near the limits (make_corpus.py)\n" +
                                "\n".join(['"PAR1"', '"\\x15\\x00"', '"\\x15\\x02"', '"\\x19\\x1c"', '"\\x16\\x00"'] + sizes) +
                                "\n").encode()
    out["dict/arrow.dict"] = ("# Arrow IPC's magic, continuation marker, sizes near the limits (make_corpus.py)\n" +
                              "\n".join(['"ARROW1"', '"ARROW1\\x00\\x00"'] + sizes) + "\n").encode()


def main():
    check = "--check" in sys.argv[1:]
    dictionaries(schema_tables())
    accelerator_seeds()
    launch_seeds()
    checkpoint_seeds()
    safetensors_seeds()
    hf_seeds()
    args_seeds()
    adapter_seeds()
    pattern_seeds()
    parallelism_seeds()
    profile_seeds()
    text_seeds()
    data_seeds()
    differ = []
    for rel, data in sorted(out.items()):
        path = os.path.join(HERE, rel)
        old = open(path, "rb").read() if os.path.exists(path) else None
        if old == data:
            continue
        differ.append(rel)
        if not check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
    # seeds this script no longer writes (inputs the fuzzers found, "found-*", are kept by hand)
    for sub in ("corpus", "dict"):
        for dirpath, _, names in os.walk(os.path.join(HERE, sub)):
            for n in names:
                rel = os.path.relpath(os.path.join(dirpath, n), HERE)
                if rel not in out and not n.startswith("found-"):
                    differ.append(rel + " (stale)")
                    if not check:
                        os.remove(os.path.join(dirpath, n))
    if check:
        if differ:
            sys.exit("make_corpus: out of date: " + ", ".join(differ[:10]) + " (run tests/fuzz/make_corpus.py)")
        print("make_corpus: up to date")
    else:
        print(f"make_corpus: {len(out)} files, {len(differ)} written or removed")


main()
