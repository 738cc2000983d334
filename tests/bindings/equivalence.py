#!/usr/bin/env python3
"""The same program in every language: examples/{c,rust,go,java}/train_mlp each train the MLP recipe of
examples/c/train_mlp.c with 2 processes under `acc launch`; every binding's final parameters must equal
the C program's (max |diff| <= 1e-6) and its printed losses must agree.

Then a quick run of each finetune_llama (20 steps, 8 new tokens, 1 process, on a small text directory
made here): a loss line at steps 1 and 20, a Hugging Face directory (config.json, model.safetensors)
saved, a continuation printed; and the same with --lora: the LoRA line, peft's adapter files
(adapter/adapter_config.json, adapter/adapter_model.safetensors) beside the base model, the adapter
loaded onto a fresh base, a continuation. Go's and Java's (bytes as tokens, as the C program) print
exactly what examples/c/finetune_llama prints; Rust's trains a byte-level BPE first and saves it as
tokenizer.json.

Last a quick run of each chat_sft (C++, Rust, Go, Java; 20 steps, 2 processes, on
examples/data/chat_sft.jsonl, read by acc_dataset_from_files as TRL's SFTTrainer reads it): the
tokenizer and peft's adapter files saved, a dataset of every line of the file, and exactly the lines
examples/c/chat_sft prints (the rendered conversation, the count of conversations and of assistant
tokens, the loss lines, the answer streamed as text).

Usage: equivalence.py ACC C_TRAIN_MLP SOURCE_ROOT BUILD_ROOT [LIBACC_JNI [C_FINETUNE_LLAMA [C_CHAT_SFT
       [CPP_CHAT_SFT]]]]
A language whose toolchain is missing is skipped with a message (exit 77 when none is left), unless
ACC_BINDINGS_REQUIRED=1, which makes it a failure.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_f32 import read_safetensors  # noqa: E402

ACC, C_EXE, SRC, BUILD = sys.argv[1:5]
JNI = sys.argv[5] if len(sys.argv) > 5 else ""
C_FINETUNE = sys.argv[6] if len(sys.argv) > 6 else ""
C_CHAT_SFT = sys.argv[7] if len(sys.argv) > 7 else ""
CPP_CHAT_SFT = sys.argv[8] if len(sys.argv) > 8 else ""
STEPS = 100
TOLERANCE = 1e-6
REQUIRED = os.environ.get("ACC_BINDINGS_REQUIRED") == "1"

env = dict(os.environ)
env["PATH"] = env.get("PATH", "") + os.pathsep + os.path.expanduser("~/.cargo/bin") + os.pathsep + "/usr/local/go/bin"
env["PKG_CONFIG_PATH"] = os.path.join(BUILD, "meson-uninstalled") + (
    os.pathsep + env["PKG_CONFIG_PATH"] if env.get("PKG_CONFIG_PATH") else "")
env["LD_LIBRARY_PATH"] = os.path.join(BUILD, "src") + (
    os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
out_dir = os.path.join(BUILD, "bindings", "equivalence")
os.makedirs(out_dir, exist_ok=True)
failures = []
skipped = []


def run(cmd, cwd=None, extra_env=None, timeout=900):
    e = dict(env, **(extra_env or {}))
    p = subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def have(tool):
    return shutil.which(tool, path=env["PATH"]) is not None


def build_rust():
    if not have("cargo"):
        return None
    target = os.path.join(BUILD, "bindings", "cargo")
    args = ["build", "--manifest-path", os.path.join(SRC, "examples/rust/Cargo.toml")]
    try:
        run(["cargo", "--offline"] + args, extra_env={"CARGO_TARGET_DIR": target})
    except RuntimeError:
        run(["cargo"] + args, extra_env={"CARGO_TARGET_DIR": target})  # first run: fetch the crates (tokenizers)
    return {name: [os.path.join(target, "debug", name)] for name in ("train_mlp", "finetune_llama", "chat_sft")}


def build_go():
    if not have("go"):
        return None
    cmds = {}
    for name in ("train_mlp", "finetune_llama", "chat_sft"):
        exe = os.path.join(out_dir, f"{name}_go")
        run(["go", "build", "-o", exe, f"./{name}"], cwd=os.path.join(SRC, "examples/go"))
        cmds[name] = [exe]
    return cmds


def build_java():
    if not (have("mvn") and have("javac") and JNI and os.path.isfile(JNI)):
        return None
    target = os.path.join(BUILD, "bindings", "maven-jar")
    args = ["-B", "-q", "-f", os.path.join(SRC, "bindings/java/pom.xml"), f"-Dacc.build.dir={target}",
            f"-Dacc.native.dir={os.path.dirname(JNI)}", "-DskipTests", "package"]
    try:
        run(["mvn", "-o"] + args)
    except RuntimeError:
        run(["mvn"] + args)  # first run: fetch the plugins into ~/.m2
    jar = os.path.join(target, "acc-1.4.0.jar")
    classes = os.path.join(out_dir, "java-classes")
    sources = os.path.join(SRC, "examples/java/src/main/java/ai/acc/examples")
    run(["javac", "-cp", jar, "-d", classes,
         *(os.path.join(sources, f"{cls}.java") for cls in ("TrainMlp", "FinetuneLlama", "ChatSft"))])
    # The JNI library comes from the jar (extracted to a versioned cache), as for a user.
    return {name: ["java", "-cp", jar + os.pathsep + classes, f"ai.acc.examples.{cls}"]
            for name, cls in (("train_mlp", "TrainMlp"), ("finetune_llama", "FinetuneLlama"), ("chat_sft", "ChatSft"))}



def launch(lang, cmd):
    path = os.path.join(out_dir, f"{lang}.safetensors")
    if os.path.exists(path):
        os.remove(path)
    out = run([ACC, "launch", "--num_processes", "2", "--main_process_port", "0", *cmd, path, str(STEPS)],
              timeout=600)
    losses = dict(re.findall(r"^(final loss|eval mse): ([0-9.]+)", out, re.M))
    print(f"{lang:5}: {out.strip().splitlines()[-1]}  ({losses.get('eval mse', '?')} eval mse)")
    return read_safetensors(path), {k: float(v) for k, v in losses.items()}


def finetune(lang, cmd, text_dir, lora=False):
    """A quick run of finetune_llama (with --lora: of its adapter); its printed lines with the output directory
    as OUT."""
    out = os.path.join(out_dir, f"finetune-{lang}" + ("-lora" if lora else ""))
    shutil.rmtree(out, ignore_errors=True)
    stdout = run([ACC, "launch", "--num_processes", "1", "--main_process_port", "0", *cmd, "--steps", "20",
                  "--batch", "4", "--new-tokens", "8", "--out", out, "--text-dir", text_dir]
                 + (["--lora"] if lora else []), timeout=600)
    files = ["model/config.json", "model/model.safetensors"] + (["model/tokenizer.json"] if lang == "rust" else [])
    if lora:
        files += ["adapter/adapter_config.json", "adapter/adapter_model.safetensors"]
    for f in files:
        if not os.path.isfile(os.path.join(out, f)):
            raise RuntimeError(f"finetune_llama saved no {f}:\n{stdout}")
    lines = stdout.replace(out, "OUT").splitlines()
    losses = [l for l in lines if re.match(r"step +(1|20)/20  loss [0-9.]+$", l)]
    if len(losses) != 2 or not any(l.startswith("--- ") for l in lines):
        raise RuntimeError(f"finetune_llama printed no loss lines or continuation:\n{stdout}")
    if lora and not (any(re.match(r"LoRA .*: trainable params: [1-9]", l) for l in lines)
                     and "loaded OUT/adapter onto OUT/model" in lines):
        raise RuntimeError(f"finetune_llama --lora printed no LoRA line or did not load the adapter:\n{stdout}")
    print(f"{lang:5}: finetune_llama{' --lora' if lora else ''} {'; '.join(losses)}")
    return lines


def chat_sft(lang, cmd):
    """A quick run of chat_sft with 2 processes; its printed lines with the output directory as OUT."""
    out = os.path.join(out_dir, f"chat_sft-{lang}")
    shutil.rmtree(out, ignore_errors=True)
    data = os.path.join(SRC, "examples/data/chat_sft.jsonl")
    stdout = run([ACC, "launch", "--num_processes", "2", "--main_process_port", "0", *cmd, "--steps", "20",
                  "--batch", "8", "--out", out, "--data", data], timeout=600)
    for f in ("tokenizer/tokenizer.json", "tokenizer/chat_template.jinja", "adapter/adapter_config.json",
              "adapter/adapter_model.safetensors"):
        if not os.path.isfile(os.path.join(out, f)):
            raise RuntimeError(f"chat_sft saved no {f}:\n{stdout}")
    lines = stdout.replace(out, "OUT").splitlines()
    losses = [l for l in lines if re.match(r"step +(1|20)/20  loss [0-9.]+$", l)]
    answers = [l for l in lines if l.startswith("assistant: ")]
    if len(losses) != 2 or len(answers) != 1:
        raise RuntimeError(f"chat_sft printed no loss lines or answer:\n{stdout}")
    with open(data, encoding="utf-8") as f:
        conversations = sum(1 for line in f if line.strip())
    if not any(re.match(rf"{conversations} conversations, [1-9][0-9]* assistant tokens to learn;", l) for l in lines):
        raise RuntimeError(f"chat_sft's dataset does not hold the {conversations} conversations of {data}:\n{stdout}")
    print(f"{lang:5}: chat_sft {'; '.join(losses)}; {answers[0]}")
    return lines


reference, ref_losses = launch("c", [C_EXE])
builds = {}
for lang, build in (("rust", build_rust), ("go", build_go), ("java", build_java)):
    try:
        cmd = builds[lang] = build()
    except Exception as e:  # a build failure is a test failure
        failures.append(f"{lang}: build failed: {e}")
        continue
    if cmd is None:
        (failures if REQUIRED else skipped).append(f"{lang}: toolchain or JNI library missing")
        continue
    cmd = cmd["train_mlp"]
    try:
        params, losses = launch(lang, cmd)
    except Exception as e:
        failures.append(f"{lang}: run failed: {e}")
        continue
    if params.keys() != reference.keys():
        failures.append(f"{lang}: parameter names {sorted(params)} != {sorted(reference)}")
        continue
    diff = max(max(abs(a - b) for a, b in zip(params[k], reference[k])) for k in reference)
    print(f"{lang:5}: max |param - C param| = {diff:.3g} over {len(reference)} tensors")
    if diff > TOLERANCE:
        failures.append(f"{lang}: parameters differ from C by {diff}")
    for k, v in ref_losses.items():
        if abs(losses.get(k, float("nan")) - v) > 1e-5:
            failures.append(f"{lang}: {k} {losses.get(k)} != C's {v}")

text_dir = os.path.join(out_dir, "finetune-text")
os.makedirs(text_dir, exist_ok=True)
for name, line in (("a.txt", "Permission is hereby granted, free of charge, to any person obtaining a copy. "),
                   ("b.txt", "This program is free software: you can redistribute it and/or modify it. ")):
    with open(os.path.join(text_dir, name), "w") as f:
        f.write(line * 40)
if not os.path.lexists(os.path.join(text_dir, "c.txt")):
    os.symlink("a.txt", os.path.join(text_dir, "c.txt"))  # as GPL -> GPL-3: a link is read as its file
for lora in (False, True):
    name = "finetune_llama" + (" --lora" if lora else "")
    ref_lines = None
    if C_FINETUNE:
        try:
            ref_lines = finetune("c", [C_FINETUNE], text_dir, lora)
        except Exception as e:
            failures.append(f"c: {name} failed: {e}")
    for lang, cmds in builds.items():
        if not cmds:
            continue
        try:
            lines = finetune(lang, cmds["finetune_llama"], text_dir, lora)
        except Exception as e:
            failures.append(f"{lang}: {name} failed: {e}")
            continue
        if lang != "rust" and ref_lines is not None and lines != ref_lines:
            failures.append(f"{lang}: {name} printed {lines}, C's {ref_lines}")

if C_CHAT_SFT:
    try:
        ref_lines = chat_sft("c", [C_CHAT_SFT])
    except Exception as e:
        failures.append(f"c: chat_sft failed: {e}")
        ref_lines = None
    others = dict(builds)
    if CPP_CHAT_SFT:
        others = {"c++": {"chat_sft": [CPP_CHAT_SFT]}, **others}
    for lang, cmds in others.items():
        if not cmds:
            continue
        try:
            lines = chat_sft(lang, cmds["chat_sft"])
        except Exception as e:
            failures.append(f"{lang}: chat_sft failed: {e}")
            continue
        if ref_lines is not None and lines != ref_lines:
            failures.append(f"{lang}: chat_sft printed {lines}, C's {ref_lines}")

for s in skipped:
    print("SKIPPED", s)
for f in failures:
    print("FAILED", f, file=sys.stderr)
if failures:
    sys.exit(1)
if len(skipped) == 3:
    sys.exit(77)
print("all languages match the C program")
