"""What the bench scripts share: the C side's binary, the page-cache drop, a run of one side and a run of ranks."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_LIB = os.path.join(ROOT, ".venv", "lib", "python3.11", "site-packages", "torch", "lib")


def binary(build, name):
    """build/bench/NAME when meson built it (and it is newer than bench/NAME.c), otherwise compiled here against
    build/src/libacc.so into build/bench-NAME/."""
    build = os.path.abspath(build)
    src = os.path.join(ROOT, "bench", name + ".c")
    built = os.path.join(build, "bench", name)
    if os.path.exists(built) and os.path.getmtime(built) >= os.path.getmtime(src):
        return built
    out = os.path.join(build, "bench-" + name, name)
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        lib = os.path.join(build, "src")
        subprocess.run(["cc", "-std=c99", "-O2", "-D_FILE_OFFSET_BITS=64", "-I", os.path.join(ROOT, "capi", "include"),
                        src, "-o", out, "-L", lib, "-lacc", f"-Wl,-rpath,{lib}:{TORCH_LIB}"], check=True)
    return out


def can_drop_caches():
    """Drops the page cache (after sync) when this process may (root); False otherwise."""
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run_ranks(cmd, env, out, procs, timeout=1800):
    """Runs a job of `procs` ranks that each write OUT/rank{r}.json; returns those (in rank order) and removes out."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    ranks = []
    for r in range(procs):
        with open(os.path.join(out, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    shutil.rmtree(out)
    return ranks


def run(cmd, env, timeout=3600):
    """Runs one side; its last line starting with "{" is its JSON result."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    return json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])
