#!/usr/bin/env python3
"""The same program in every language: examples/{c,rust,go,java}/train_mlp each train the MLP recipe of
examples/c/train_mlp.c with 2 processes under `acc launch`; every binding's final parameters must equal
the C program's (max |diff| <= 1e-6) and its printed losses must agree.

Usage: equivalence.py ACC C_TRAIN_MLP SOURCE_ROOT BUILD_ROOT [LIBACC_JNI]
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
    run(["cargo", "build", "--offline", "--manifest-path", os.path.join(SRC, "examples/rust/Cargo.toml")],
        extra_env={"CARGO_TARGET_DIR": target})
    return [os.path.join(target, "debug", "train_mlp")]


def build_go():
    if not have("go"):
        return None
    exe = os.path.join(out_dir, "train_mlp_go")
    run(["go", "build", "-o", exe, "./train_mlp"], cwd=os.path.join(SRC, "examples/go"))
    return [exe]


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
    jar = os.path.join(target, "acc-0.1.0.jar")
    classes = os.path.join(out_dir, "java-classes")
    run(["javac", "-cp", jar, "-d", classes,
         os.path.join(SRC, "examples/java/src/main/java/ai/acc/examples/TrainMlp.java")])
    # The JNI library comes from the jar (extracted to a versioned cache), as for a user.
    return ["java", "-cp", jar + os.pathsep + classes, "ai.acc.examples.TrainMlp"]



def launch(lang, cmd):
    path = os.path.join(out_dir, f"{lang}.safetensors")
    if os.path.exists(path):
        os.remove(path)
    out = run([ACC, "launch", "--num_processes", "2", "--main_process_port", "0", *cmd, path, str(STEPS)],
              timeout=600)
    losses = dict(re.findall(r"^(final loss|eval mse): ([0-9.]+)", out, re.M))
    print(f"{lang:5}: {out.strip().splitlines()[-1]}  ({losses.get('eval mse', '?')} eval mse)")
    return read_safetensors(path), {k: float(v) for k, v in losses.items()}


reference, ref_losses = launch("c", [C_EXE])
for lang, build in (("rust", build_rust), ("go", build_go), ("java", build_java)):
    try:
        cmd = build()
    except Exception as e:  # a build failure is a test failure
        failures.append(f"{lang}: build failed: {e}")
        continue
    if cmd is None:
        (failures if REQUIRED else skipped).append(f"{lang}: toolchain or JNI library missing")
        continue
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

for s in skipped:
    print("SKIPPED", s)
for f in failures:
    print("FAILED", f, file=sys.stderr)
if failures:
    sys.exit(1)
if len(skipped) == 3:
    sys.exit(77)
print("all languages match the C program")
