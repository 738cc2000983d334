#!/usr/bin/env python3
"""Programs built against libacc 1.0 and 1.1 (tests/compat/meson.build) run against today's library, under DDP and
under sharded strategies, as they ran against their own release (docs/abi.md, "Versioned symbols").
  run_compat.py ACC LIBACC BUILD_DIR"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import expect, finish  # noqa: E402

acc, libacc, build = sys.argv[1:4]
env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(libacc)), ACC_CONFIG_FILE="none")
STRATEGIES = {
    "DDP": None,
    "FSDP": "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n",
    "ZeRO-3": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n",
}


def launch(tmp, strategy, program, *args):
    cmd = [acc, "launch", "--cpu", "--num_processes", "2", "--main_process_port", "0"]
    if STRATEGIES[strategy]:
        path = os.path.join(tmp, strategy + ".yaml")
        with open(path, "w") as f:
            f.write(STRATEGIES[strategy])
        cmd += ["--config_file", path]
    cmd += [os.path.join(build, program), *args]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as e:
        return -1, f"timed out after 180 s: {e.stdout}{e.stderr}"
    return p.returncode, p.stdout + p.stderr


def versions(program):
    """The acc_* symbols the program binds, with their versions: {'acc_version': 'ACC_1.0', ...}."""
    out = subprocess.run(["readelf", "-W", "--dyn-syms", os.path.join(build, program)], capture_output=True,
                         text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():  # "... UND acc_model_state_get@ACC_1.0 (2)"
        for field in line.split():
            if field.startswith("acc_") and "@" in field:
                base, version = field.split("@", 1)
                syms[base] = version
    return syms


def needed(program):
    out = subprocess.run(["readelf", "-d", os.path.join(build, program)], capture_output=True, text=True,
                         check=True).stdout
    return [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


with tempfile.TemporaryDirectory() as tmp:
    for tag in ("1_0", "1_1"):
        program = "train_mlp_" + tag
        expect("libacc.so.1" in needed(program) and not any("stub" in n for n in needed(program)),
               f"{program} needs libacc.so.1, as built against its release", str(needed(program)))
        expect(versions(program).get("acc_model_save_safetensors") == "ACC_1.0",
               f"{program} binds acc_model_save_safetensors@ACC_1.0", str(versions(program)))
        out = os.path.join(tmp, program + ".safetensors")
        rc, log = launch(tmp, "DDP", program, out, "20")
        expect(rc == 0 and os.path.getsize(out) > 0, f"{program} trains under DDP and its main process saves", log)
        print(f"{program}, DDP: exit {rc}; " + " / ".join(line for line in log.splitlines() if "loss" in line)[:300])

    old, today = "state_fallback_1_1", "state_fallback_today"
    expect(versions(old).get("acc_model_state_get") == "ACC_1.0", f"{old} binds acc_model_state_get@ACC_1.0",
           str(versions(old)))
    expect(versions(today).get("acc_model_state_get") == "ACC_1.4", f"{today} binds acc_model_state_get@ACC_1.4",
           str(versions(today)))
    for strategy in STRATEGIES:
        sharded = strategy != "DDP"
        out = os.path.join(tmp, f"{old}-{strategy}")
        rc, log = launch(tmp, strategy, old, out)
        print(f"{old}, {strategy}: exit {rc}: {log.strip()[:400]}")
        if sharded:
            # 1.1's answer on the main process alone, then acc_save_model on every process.
            expect(rc == 0 and "refused:" in log and "sharded" in log and "saved" in log
                   and os.path.exists(os.path.join(out, "model.safetensors")),
                   f"{old} under {strategy}: refused on the main process, saved with acc_save_model", log)
        else:
            expect(rc == 0 and "state: " in log and "saved" not in log, f"{old} under DDP reads the state", log)
        rc, log = launch(tmp, strategy, today, os.path.join(tmp, f"{today}-{strategy}"))
        print(f"{today}, {strategy}: exit {rc}: {log.strip()[:300]}")
        expect(rc == 0 and "state: " in log and "refused" not in log,
               f"{today} under {strategy}: every process asks, the tensor is gathered", log)
finish()
