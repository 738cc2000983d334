#!/usr/bin/env python3
"""The user's files stay the user's (docs/security.md, "Files"): every save path libacc has runs into a folder
already holding a user's files (plain, read-only, in a subfolder), symlinks (into and out of the folder, dangling)
and a FIFO; afterwards nothing of the user's has changed and nothing has appeared outside the folder. Then, in a
mount namespace of its own (root only), each path runs again on a full disk (a small tmpfs) and on a read-only
one: it fails with an error naming a path there, and the previous save and the user's files are as they were.
An adapter is also saved onto a disk with room for its weights but not its config: the previous adapter stays whole.

    user_files.py SAVE_PATHS ACC MODEL_DIR      (SAVE_PATHS: tests/c/save_paths.c; MODEL_DIR: a transformers model)
"""
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile

SAVE_PATHS, ACC, MODEL = sys.argv[1:4]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def snapshot(root):
    """Every entry under root (symlinks not followed): its kind, mode and content or target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest())
            else:
                out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode))
    return out


def seed(folder, outside):
    """A user's folder: files (one read-only), a subfolder, symlinks in, out and dangling, a FIFO."""
    os.makedirs(os.path.join(outside, "dir"), exist_ok=True)
    with open(os.path.join(outside, "target.txt"), "w") as f:
        f.write("outside the folder\n")
    os.makedirs(os.path.join(folder, "sub"))
    for name, text in [("notes.txt", "my notes\n"), ("sub/results.csv", "a,b\n1,2\n"), ("ro.txt", "read only\n")]:
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    os.chmod(os.path.join(folder, "ro.txt"), 0o444)
    os.symlink(os.path.join(outside, "target.txt"), os.path.join(folder, "link_out"))
    os.symlink(os.path.join(outside, "dir"), os.path.join(folder, "link_dir"))
    os.symlink("notes.txt", os.path.join(folder, "link_in"))
    os.symlink("/nonexistent/acc", os.path.join(folder, "dangling"))
    os.mkfifo(os.path.join(folder, "pipe"))


def run(args, timeout=300):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


# Each save path as commands writing into {out}; a sharded checkpoint for merge-weights is made once, elsewhere.
scratch = tempfile.mkdtemp(prefix="acc-user-files-")
sharded = os.path.join(scratch, "sharded")
rc, text = run([SAVE_PATHS, "model", sharded, "300"])
check(rc == 0 and os.path.exists(os.path.join(sharded, "model.safetensors.index.json")), "a sharded checkpoint: " + text)
PATHS = {
    "save_state": [[SAVE_PATHS, "state", "{out}"], [SAVE_PATHS, "state", "{out}"]],  # the second over the first
    "save_model": [[SAVE_PATHS, "model", "{out}"]],
    "save_model sharded": [[SAVE_PATHS, "model", "{out}", "300"]],
    "save_pretrained": [[SAVE_PATHS, "pretrained", "{out}", MODEL]],
    "offload folder": [[SAVE_PATHS, "offload", "{out}", MODEL]],
    "trackers": [[SAVE_PATHS, "trackers", "{out}"]],
    "save_adapter": [[SAVE_PATHS, "adapter", "{out}"], [SAVE_PATHS, "adapter", "{out}", "3"]],  # over the first
    "merge-weights": [[ACC, "merge-weights", sharded, "{out}"]],
}


def run_path(name, out):
    for cmd in PATHS[name]:
        rc, text = run([a.replace("{out}", out) for a in cmd])
        if rc != 0:
            return rc, text
    return 0, ""


def user_files_kept(name, root, out, before):
    after = snapshot(root)
    changed = [k for k, v in before.items() if after.get(k) != v]
    check(not changed, f"{name}: the user's entries unchanged ({changed})")
    outside = [k for k in after if k not in before and not k.startswith(os.path.relpath(out, root) + os.sep)]
    check(not outside, f"{name}: nothing new outside the folder ({outside})")


def seeded_folders():
    for name in PATHS:
        root = os.path.join(scratch, name.replace(" ", "_"))
        out = os.path.join(root, "out")
        seed(out, os.path.join(root, "outside"))
        before = snapshot(root)
        rc, text = run_path(name, out)
        check(rc == 0, f"{name}: into a folder holding the user's files ({text.strip()})")
        user_files_kept(name, root, out, before)
        if name == "save_state":
            rc, text = run([SAVE_PATHS, "load", out])
            check(rc == 0, f"save_state: the checkpoint loads from the user's folder ({text.strip()})")


def fill(mnt, leave=0):
    """Takes every byte of mnt's free space but `leave` (a multiple of the page size) with a file: its path."""
    filler = os.path.join(mnt, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        chunk = b"\0" * (1 << 16)
        while True:
            try:
                if os.write(fd, chunk) <= 0:
                    break
            except OSError:
                break
        if leave:
            st = os.statvfs(mnt)
            free = st.f_bavail * st.f_frsize
            os.ftruncate(fd, os.fstat(fd).st_blocks * 512 - (leave - free))
    finally:
        os.close(fd)
    return filler


def adapter_second_file(mnt, out):
    """Issue 36: save_adapter wrote the weights, then the config; with room for the new weights but not the config
    (a reader holds the previous weights open, so replacing them frees nothing), the folder kept the new weights
    beside the old config. Now both files or neither: the previous adapter stays whole."""
    probe = os.path.join(scratch, "adapter_probe")
    shutil.rmtree(probe, ignore_errors=True)
    rc, text = run([SAVE_PATHS, "adapter", probe, "4"])
    check(rc == 0, f"save_adapter: an adapter of rank 4 elsewhere ({text.strip()})")
    if rc != 0:
        return
    page = os.statvfs(mnt).f_frsize
    weights = os.path.getsize(os.path.join(probe, "adapter_model.safetensors"))
    before = snapshot(mnt)
    held = os.open(os.path.join(out, "adapter_model.safetensors"), os.O_RDONLY)
    try:
        filler = fill(mnt, leave=-(-weights // page) * page)
        st = os.statvfs(mnt)
        check(st.f_bavail * st.f_frsize == -(-weights // page) * page,
              f"save_adapter: room for the weights only ({st.f_bavail * st.f_frsize} bytes free, weights {weights})")
        rc, text = run([SAVE_PATHS, "adapter", out, "4"])
        check(rc != 0 and mnt in text and "adapter_config.json" in text,
              f"save_adapter: no room for the config, an error naming it ({text.strip()[:300]})")
        os.remove(filler)
    finally:
        os.close(held)
    after = snapshot(mnt)
    check(after == before, f"save_adapter: the previous adapter whole, both files old, nothing left behind "
                           f"({sorted(set(after.items()) ^ set(before.items()))[:6]})")


def faults():
    """In a private mount namespace: a small tmpfs, then full, then read-only."""
    mnt = os.path.join(scratch, "mnt")
    os.makedirs(mnt)
    for name in PATHS:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "acc-test", mnt], check=True)
        try:
            out = os.path.join(mnt, "out")
            seed(out, os.path.join(mnt, "outside"))
            rc, text = run_path(name, out)
            check(rc == 0, f"{name}: a first save on the small disk ({text.strip()})")
            before = snapshot(mnt)
            # Full: a filler takes every byte left.
            fill(mnt)
            rc, text = run_path(name, out)
            check(rc != 0 and mnt in text, f"{name}: on a full disk, an error naming a path there ({text.strip()[:300]})")
            os.remove(os.path.join(mnt, "filler"))
            after = snapshot(mnt)
            check(after == before, f"{name}: on a full disk, the previous save and the user's files unchanged "
                                   f"({sorted(set(after.items()) ^ set(before.items()))[:6]})")
            # Read-only: every write refused.
            subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
            rc, text = run_path(name, out)
            check(rc != 0 and mnt in text, f"{name}: on a read-only disk, an error naming a path there ({text.strip()[:300]})")
            subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
            check(snapshot(mnt) == before, f"{name}: on a read-only disk, nothing changed")
            if name == "save_state":
                rc, text = run([SAVE_PATHS, "load", out])
                check(rc == 0, f"save_state: after both faults the previous checkpoint loads ({text.strip()})")
            if name == "save_adapter":
                adapter_second_file(mnt, out)
        finally:
            subprocess.run(["umount", mnt])


if len(sys.argv) > 4 and sys.argv[4] == "--faults":
    faults()
else:
    seeded_folders()
if len(sys.argv) > 4:
    pass
elif os.geteuid() == 0 and shutil.which("unshare"):
    # The faults need mounts: the same script again, in a mount namespace of its own.
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, __file__, *sys.argv[1:4], "--faults"],
                       capture_output=True, text=True, timeout=1200)
    sys.stdout.write(r.stdout + r.stderr)
    check(r.returncode == 0, "the faults on a small tmpfs (full, read-only)")
else:
    print("skipped the faults on a small tmpfs: they need root and unshare")

shutil.rmtree(scratch, ignore_errors=True)
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
