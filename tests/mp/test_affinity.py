#!/usr/bin/env python3
"""enable_cpu_affinity with real processes started by acc launch: each rank's sched_getaffinity after
acc_accelerator_create is its own share of the cores acc launch may use (disjoint, together all of them, as even as
the count allows); without the flag every rank keeps them all.

test_affinity.py ACC AFFINITY_PROBE"""
import os
import subprocess
import sys
import tempfile


def run(acc, probe, flags, nproc, config_json=""):
    env = dict(os.environ, ACC_CONFIG_FILE="none")
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([acc, "launch", "--cpu", "--num_processes", str(nproc), "--main_process_port", "0", *flags,
                              probe, config_json], env=env, cwd=tmp, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"acc launch {' '.join(flags)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    cores = {}
    for line in out.stdout.splitlines():
        if line.startswith("rank "):
            _, rank, _, listed = line.split()
            cores[int(rank)] = {int(c) for c in listed.split(",")}
    if sorted(cores) != list(range(nproc)):
        sys.exit(f"expected a line from each of {nproc} ranks:\n{out.stdout}\n{out.stderr}")
    return cores


def main():
    acc, probe = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    allowed = os.sched_getaffinity(0)
    for nproc in (2, 3):
        plain = run(acc, probe, [], nproc)
        assert all(c == allowed for c in plain.values()), f"without the flag every rank keeps {allowed}: {plain}"
        for how in (["--enable_cpu_affinity"], []):
            # The flag, or the key in the explicit JSON of acc_accelerator_create.
            cfg = "" if how else '{"enable_cpu_affinity": true}'
            pinned = run(acc, probe, how, nproc, cfg)
            union = set().union(*pinned.values())
            sizes = sorted(len(c) for c in pinned.values())
            if len(allowed) >= nproc:
                for a in range(nproc):
                    for b in range(a + 1, nproc):
                        assert not (pinned[a] & pinned[b]), f"ranks {a} and {b} share cores: {pinned}"
                assert union == allowed, f"the shares {pinned} do not cover {allowed}"
                assert sizes[-1] - sizes[0] <= len(allowed) // nproc + 1, f"uneven shares {pinned}"
            else:  # more processes than cores: each still gets one
                assert all(len(c) == 1 and c <= allowed for c in pinned.values()), pinned
            print(f"{nproc} processes, {'flag' if how else 'explicit JSON'}: {pinned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
