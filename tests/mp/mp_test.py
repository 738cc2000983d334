#!/usr/bin/env python3
"""Multi-process tests: real processes started by `acc launch`, talking over real c10d groups.

Usage: mp_test.py ACC WORKER CASE   (WORKER: mp_worker or mp_loop, the program each case drives)
"""
import json
import os
import signal
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_f32 import max_abs_diff, read_safetensors  # noqa: E402
from netns import two_machines  # noqa: E402
from checks import expect, finish  # noqa: E402

# zero3_init_test.py imports this module for launch(): its arguments start with ACC and WORKER too.
ACC, WORKER = sys.argv[1], sys.argv[2]


def launch(n, *args, timeout=300, launcher_args=(), config=None, env_extra=None):
    """config: the body of an Accelerate config file (it gets use_cpu: true) instead of --cpu."""
    if config is None:
        # --cpu: these are CPU tests, also on a machine with GPUs (fewer GPUs than ranks is an error there).
        launcher_args = ("--cpu", *launcher_args)
    else:
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(config + "use_cpu: true\n")
        launcher_args = ("--config_file", path, *launcher_args)
    cmd = [ACC, "launch", "--num_processes", str(n), "--main_process_port", "0", *launcher_args, WORKER,
           *map(str, args)]
    start = time.monotonic()
    # No user config file may leak into a test run.
    env = dict(os.environ, ACC_CONFIG_FILE="none", **(env_extra or {}))
    env = {k: v for k, v in env.items() if v is not None}  # None in env_extra: leave that variable out
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    finally:
        if config is not None:
            os.unlink(launcher_args[1])
    return p, time.monotonic() - start




def case_collectives():
    for n in (2,):
        p, _ = launch(n, "collectives")
        expect(p.returncode == 0, f"collectives on {n} ranks", p.stdout + p.stderr)


def case_torchrun_env():
    """Processes started by another launcher (torchrun, accelerate launch) only set the environment."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ACCELERATE_USE_CPU="true",
                   ACC_CONFIG_FILE="none")
        procs.append(subprocess.Popen([WORKER, "collectives"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for rank, p in enumerate(procs):
        out, _ = p.communicate(timeout=120)
        expect(p.returncode == 0, f"rank {rank} under torchrun's environment contract", out)


def case_gather_for_metrics():
    for n in (2, 3):
        p, _ = launch(n, "gather_for_metrics", 99, 16)
        expect(p.returncode == 0, f"gather_for_metrics, 99 samples, batch 16, {n} processes", p.stdout + p.stderr)


def case_ddp_equivalence():
    with tempfile.TemporaryDirectory() as d:
        for opt in ("sgd", "adamw"):
            runs = {}
            for n, batch, steps in ((2, 8, 20), (1, 16, 20), (1, 16, 0)):
                out = os.path.join(d, f"{opt}-{n}-{steps}.safetensors")
                p, _ = launch(n, "train", batch, steps, opt, out)
                expect(p.returncode == 0, f"train {opt} on {n} processes", p.stdout + p.stderr)
                if p.returncode != 0:
                    return
                runs[(n, steps)] = read_safetensors(out)
            diff = max_abs_diff(runs[(2, 20)], runs[(1, 20)])
            moved = max_abs_diff(runs[(1, 20)], runs[(1, 0)])
            print(f"{opt}: 2 processes x batch 8 vs 1 process x batch 16 after 20 steps: max |diff| = {diff:.3g}; "
                  f"parameters moved by up to {moved:.3g}")
            expect(diff <= 1e-5, f"{opt}: DDP equals single-process training", f"max abs diff {diff}")
            expect(moved > 1e-3, f"{opt}: training changed the parameters", f"moved {moved}")


def case_rank_failure():
    with tempfile.TemporaryDirectory() as d:
        p, seconds = launch(2, "exit_on_rank", 1, 3, d, timeout=60)
        out = p.stdout + p.stderr
        expect(p.returncode != 0, "acc exits non-zero when a rank fails", out)
        expect(seconds < 10, f"acc returned within 10 s (took {seconds:.1f} s)")
        expect(re.search(r"rank\D{0,3}1\b", out, re.I) is not None, "the report names rank 1", out)
        expect(re.search(r"\b3\b", out) is not None, "the report names exit status 3", out)
        time.sleep(0.2)
        pids = []
        for name in os.listdir(d):
            with open(os.path.join(d, name)) as f:
                pids.append(int(f.read()))
        expect(len(pids) == 2, "both ranks recorded their pid", str(pids))
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            expect(not alive, f"process {pid} is gone")


def case_missing_rank():
    """A rank that never starts: the others say every ACC_WAIT_REPORT_SECONDS whom they wait for, and fail at the
    timeout naming it (c10d waited 1800 s in silence)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    def start(rank, world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   ACCELERATE_USE_CPU="true", ACC_CONFIG_FILE="none", ACC_WAIT_REPORT_SECONDS="0.5")
        return subprocess.Popen([WORKER, "rendezvous", "3"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    # ranks 0 and 2 of 3: rank 1 never comes
    procs = [start(0, 3), start(2, 3)]
    for rank, p in zip((0, 2), procs):
        out, _ = p.communicate(timeout=60)
        expect(p.returncode == 1, f"rank {rank} fails when rank 1 never joins", out)
        expect(f"libacc: rank {rank}: waiting for rank 1 to join (2 of 3 joined" in out, f"rank {rank} says whom it waits for", out)
        # (rank 0 hosts the store: when it gives up first, rank 2 learns it as "rank 0 ended the rendezvous")
        expect("ACC_ERR_DISTRIBUTED" in out and "rank 1 of 3 never joined" in out,
               f"rank {rank}'s error names rank 1", out)
    # rank 1 of 2 alone: rank 0's store never comes
    p = start(1, 2)
    out, _ = p.communicate(timeout=60)
    expect(p.returncode == 1 and "waiting for rank 0's store at 127.0.0.1" in out and "ACC_ERR_DISTRIBUTED" in out
           and "rank 0's store did not come within 3 s" in out and "frame #" not in out,
           "a rank without rank 0 says so and fails at the timeout", out)


def case_stalled_peer():
    """A peer that stalls past the collective timeout: ACC_ERR_DISTRIBUTED, one readable line (was INTERNAL with a
    16-line C++ backtrace)."""
    p, seconds = launch(2, "stalled_peer", timeout=120)
    out = p.stdout + p.stderr
    expect(p.returncode == 0, "rank 0 saw ACC_ERR_DISTRIBUTED without a backtrace", out)
    expect("all_reduce failed" in out, "the message names the collective", out)


def shm_segments():
    """Our shared-memory segments now in /dev/shm (runtime/shm_backend.cpp names them acc-shm-PID-RANDOM)."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("acc-shm-")}
    except FileNotFoundError:
        return set()


def case_shm():
    """The shared-memory CPU collectives against Gloo (mp_shm equal): 2 ranks bit for bit, 3 within (n-1)
    roundings; small step buffers (many steps, odd splits) and the default ones. Nothing left in /dev/shm."""
    before = shm_segments()
    for n, slot in ((2, "4096"), (3, "4096"), (2, None)):
        env = {"ACC_SHM_SLOT_BYTES": slot} if slot else {}
        p, seconds = launch(n, "equal", 60, timeout=400, env_extra=env)
        out = p.stdout + p.stderr
        expect(p.returncode == 0 and out.count(" 0 failed") == n, f"{n} ranks, step buffers {slot or 'default'}: "
               f"every operation as Gloo's ({seconds:.1f} s)", out[-4000:])
        expect(re.search(r"rank 0: [1-9]\d* passed", out) is not None, f"{n} ranks ran checks", out[-2000:])
    expect(shm_segments() == before, "nothing left in /dev/shm", str(shm_segments() - before))


def case_shm_dead_rank(machines=("", "", "")):
    """A rank SIGKILLed in the middle of shared-memory all-reduces: the others fail at once (not at the 60 s
    timeout) naming it, and nothing is left in /dev/shm. The processes are started directly: the launcher would end
    the others itself. Rank 1 stays a zombie (not reaped) while rank 0 waits: it counts as dead. machines: each
    rank's ACC_SHM_MACHINE (case_hierarchical: two "machines"; those on the other one fail through the leaders')."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    before = shm_segments()
    world = len(machines)
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   ACC_CONFIG_FILE="none", ACC_SHM_MACHINE=machines[rank])
        procs.append(subprocess.Popen([WORKER, "die", "60"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    start = time.monotonic()
    for rank in (r for r in range(world) if r != 1):
        out, _ = procs[rank].communicate(timeout=90)
        seconds = time.monotonic() - start
        expect(procs[rank].returncode == 0 and "CAUGHT" in out, f"rank {rank} fails in the collective", out)
        if machines[rank] == machines[1]:
            expect(re.search(r"rank 1 \(pid \d+\) died", out) is not None or "rank 1 gave up" in out or
                   ("rank 0 gave up" in out and "rank 1 (pid" in out), f"rank {rank}'s error names rank 1", out)
        else:
            expect("hierarchical all-reduce between the machines' first ranks" in out,
                   f"rank {rank} (another machine) fails through the leaders' Gloo", out)
        expect(seconds < 20, f"rank {rank} failed within 20 s, not at the 60 s timeout ({seconds:.1f} s)")
    procs[1].wait(timeout=30)
    expect(procs[1].returncode == -signal.SIGKILL, "rank 1 was killed", str(procs[1].returncode))
    expect(shm_segments() == before, "nothing left in /dev/shm", str(shm_segments() - before))


def wait_for_new_segment(before, procs, seconds=60):
    """The name of a segment that appeared in /dev/shm since `before` (None if none came while procs ran)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        new = shm_segments() - before
        if new:
            return sorted(new)[0]
        if any(p.poll() is not None for p in procs):
            return None
        time.sleep(0.02)
    return None


def rank_pids(acc_pid):
    """{RANK: pid} of the processes `acc launch` (pid acc_pid) started."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != acc_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            out[int(env[b"RANK"])] = int(entry)
        except (OSError, IndexError, KeyError, ValueError):
            pass
    return out


def case_shm_window():
    """A process killed, or the job interrupted, while a group makes its shared-memory segment (between rank 0's
    shm_open and the unlink once every process mapped it; ACC_SHM_TEST_STALL holds one process there): the segment
    does not stay in /dev/shm. Started directly, a surviving process removes it (and rank 0 fails at once naming the
    dead one, not at the 60 s timeout); under acc launch, which stops the others itself, the launcher removes it
    once they are gone."""
    import socket
    worker = WORKER  # mp_shm
    base = dict(os.environ, ACC_CONFIG_FILE="none")
    for stalled, killed in ((1, 1), (0, 0)):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        before = shm_segments()
        procs = [subprocess.Popen([worker, "transport", "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=dict(base, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                                                      LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                                      MASTER_PORT=str(port), ACC_SHM_TEST_STALL=f"{stalled}:30"))
                 for r in range(2)]
        what = f"started directly, rank {stalled} held in the window, rank {killed} killed"
        name = wait_for_new_segment(before, procs)
        expect(name is not None, f"{what}: the segment appears", "")
        procs[killed].kill()
        start = time.monotonic()
        survivor = procs[1 - killed]
        try:
            out, _ = survivor.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            survivor.kill()
            out, _ = survivor.communicate()
        seconds = time.monotonic() - start
        procs[killed].wait(timeout=30)
        expect(survivor.returncode == 1, f"{what}: rank {1 - killed} fails", out)
        expect(seconds < 15, f"{what}: rank {1 - killed} fails within 15 s, not at the 60 s timeout ({seconds:.1f} s)",
               out)
        if killed == 1:
            expect(re.search(r"rank 1 \(pid \d+\)", out) is not None, f"{what}: rank 0's error names rank 1", out)
        expect(name not in shm_segments(), f"{what}: the surviving process removed {name}", out)
    # Under the launcher: Ctrl-C (SIGINT to acc, forwarded to both processes) and a process killed, each while a
    # process is held in the window; the other processes are stopped too, so acc removes the segment.
    for stalled, action in ((1, "interrupt"), (1, "kill 1"), (0, "kill 0")):
        before = shm_segments()
        cmd = [ACC, "launch", "--cpu", "--num_processes", "2", "--main_process_port", "0", worker, "transport", "60"]
        acc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(base, ACC_SHM_TEST_STALL=f"{stalled}:30"))
        what = f"acc launch, rank {stalled} held in the window, {action}"
        name = wait_for_new_segment(before, [acc])
        expect(name is not None, f"{what}: the segment appears", "")
        if action == "interrupt":
            acc.send_signal(signal.SIGINT)
        else:
            pid = rank_pids(acc.pid).get(int(action[-1]))
            expect(pid is not None, f"{what}: the process found", str(rank_pids(acc.pid)))
            if pid:
                os.kill(pid, signal.SIGKILL)
        try:
            out, _ = acc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            acc.kill()
            out, _ = acc.communicate()
        expect(acc.returncode != 0, f"{what}: acc exits non-zero", out[-3000:])
        expect(name not in shm_segments(), f"{what}: {name} removed", out[-3000:])
        expect(shm_segments() <= before, f"{what}: nothing left in /dev/shm", str(shm_segments() - before))


def case_shm_small():
    """A small /dev/shm, as Docker's default of 64 MiB (a tmpfs mounted in a mount namespace of the test's own, made
    with unshare; skipped where that is not allowed): 8 processes share memory (the segment was 64 MiB and a page, so
    every job of 8 or more fell back to Gloo there), within half of what is free; on 1 MiB they fall back to Gloo,
    and rank 0 says plainly what happened and what to do."""
    import shutil
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True, text=True) \
        if unshare else None
    if probe is None or probe.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs of our own on /dev/shm ({probe.stderr.strip() if probe else 'no unshare'})")
        sys.exit(77)
    for size, shared in (("64m", True), ("1m", False)):
        script = f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$0" "$@"'
        p = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", script, ACC, "launch", "--cpu",
                            "--num_processes", "8", "--main_process_port", "0", WORKER, "transport", "120"],
                           capture_output=True, text=True, timeout=500, env=dict(os.environ, ACC_CONFIG_FILE="none"))
        out = p.stdout + p.stderr
        what = f"8 processes on a {size[:-1]} MiB /dev/shm"
        expect(p.returncode == 0 and out.count(" 0 failed") == 8, f"{what}: the job runs", out[-4000:])
        transport = re.search(r"TRANSPORT (.*)", out)
        transport = transport.group(1) if transport else ""
        if shared:
            expect(transport == "shared memory", f"{what}: shared memory", out[-4000:])
        else:
            expect(transport.startswith("gloo"), f"{what}: Gloo", out[-4000:])
            line = next((x for x in out.splitlines() if "libacc: " in x and "Gloo" in x), "")
            expect("/dev/shm has" in line and " free of " in line and "--shm-size" in line and
                   "ACC_SHM_COLLECTIVES=0" in line, f"{what}: rank 0 says what happened and what to do", line or out)


def launch_machines(worker, args, envs, ip="127.0.0.1", prefixes=((), ()), per_machine=2, timeout=400):
    """Two `acc launch` (--num_machines 2, machine ranks 1 then 0) of per_machine processes each, running worker;
    envs[m], prefixes[m]: machine m's extra environment and argv prefix (tests/netns.py's). Returns (whether both
    exited 0, their output)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = [subprocess.Popen([*prefixes[m], ACC, "launch", "--cpu", "--num_processes", str(2 * per_machine),
                               "--num_machines", "2", "--machine_rank", str(m), "--main_process_ip", ip,
                               "--main_process_port", str(port), worker, *map(str, args)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, ACC_CONFIG_FILE="none", **envs[m])) for m in (1, 0)]
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    return all(p.returncode == 0 for p in procs), "\n".join(outputs)


def case_hierarchical():
    """A job on two machines of 2 processes each (ACC_SHM_MACHINE tells the launchers' processes apart on loopback;
    then two network namespaces, where they can be made): the all-reduce is two-level (shared memory inside each,
    Gloo between the first processes), exact for integers, max and min, within (n-1) roundings for sums and means;
    DDP trains as on flat Gloo; a rank killed mid-all-reduce fails every process at once. Nothing left in /dev/shm."""
    before = shm_segments()
    labels = [{"ACC_SHM_MACHINE": "m0"}, {"ACC_SHM_MACHINE": "m1"}]
    for slot in ("4096", None):
        envs = [dict(e, **({"ACC_SHM_SLOT_BYTES": slot} if slot else {})) for e in labels]
        ok, out = launch_machines(WORKER, ["hier", 60], envs)
        expect(ok and out.count(" 0 failed") == 4 and re.search(r"rank 0: [1-9]\d* passed", out) is not None,
               f"2 machines x 2 processes (ACC_SHM_MACHINE), step buffers {slot or 'default'}: every all-reduce "
               "within its bound", out[-4000:])
    with two_machines() as m:
        if m is not None:
            ok, out = launch_machines(WORKER, ["hier", 60], [{"GLOO_SOCKET_IFNAME": v} for v in m.veth],
                                      ip=m.addrs[0], prefixes=m.prefix)
            expect(ok and out.count(" 0 failed") == 4, "2 network namespaces x 2 processes: hierarchical, every "
                   "all-reduce within its bound", out[-4000:])
    # DDP (tests/mp/mp_sharded.c, gpt, 30 steps) against the same 4 processes over flat Gloo.
    sharded = os.path.join(os.path.dirname(WORKER), "mp_sharded")
    with tempfile.TemporaryDirectory() as d:
        flat = subprocess.run([ACC, "launch", "--cpu", "--num_processes", "4", "--main_process_port", "0", sharded,
                               "gpt", "30", "2", "0.05", os.path.join(d, "flat")], capture_output=True, text=True,
                              timeout=400, env=dict(os.environ, ACC_CONFIG_FILE="none", ACC_SHM_COLLECTIVES="0"))
        expect(flat.returncode == 0, "DDP on 4 processes over Gloo", flat.stdout + flat.stderr)
        ok, out = launch_machines(sharded, ["gpt", 30, 2, 0.05, os.path.join(d, "hier")], labels)
        expect(ok, "DDP on 2 machines x 2 processes, hierarchical", out[-4000:])
        if ok and flat.returncode == 0:
            want = [float(x) for x in re.findall(r"LOSS (\S+)", flat.stdout)]
            got = [float(x) for x in re.findall(r"LOSS (\S+)", out)]
            expect(want and got and all(abs(g - want[0]) <= 1e-5 * abs(want[0]) for g in got),
                   "DDP's loss as over flat Gloo (within 1e-5, relative)", f"{got} vs {want}")
            diff = max_abs_diff(read_safetensors(os.path.join(d, "flat", "model.safetensors")),
                                read_safetensors(os.path.join(d, "hier", "model.safetensors")))
            print(f"DDP, 2 machines x 2 hierarchical vs flat Gloo on 4: loss {got[0]} vs {want[0]}, "
                  f"max |parameter diff| = {diff:.3g}")
            expect(diff <= 1e-5, "DDP's parameters as over flat Gloo (within 1e-5)", str(diff))
    case_shm_dead_rank(("m0", "m0", "m1", "m1"))
    expect(shm_segments() == before, "nothing left in /dev/shm", str(shm_segments() - before))


def case_debug_mode():
    """Debug mode (Accelerate's verify_operation), switched on by the launcher's --debug (ACCELERATE_DEBUG_MODE):
    matching collectives work, and each mismatch fails on every rank with the same ACC_ERR_DISTRIBUTED message naming
    the operation and every rank's input. Off, the same mismatched gather is what it was before the check: the rank
    sent more bytes than it expects aborts inside Gloo (SIGABRT, "Received data size doesn't match expected size"),
    the other may return ACC_OK with mixed-up data (a [4, 3] tensor), and the launcher stops the job; over the shared
    memory of one machine both ranks fail, naming both all-gathers."""
    p, _ = launch(2, "debug_mode", 1, launcher_args=("--debug",), timeout=120)
    out = p.stdout + p.stderr
    expect(p.returncode == 0, "debug on: matching collectives work, mismatches fail on every rank", out)
    # "rank R: acc_<function>: message": the function differs where the ranks called different collectives
    lines = {r: [line.split(": ", 2)[2] for line in p.stdout.splitlines() if line.startswith(f"rank {r}: ")]
             for r in (0, 1)}
    expect(len(lines[0]) == 8 and lines[0] == lines[1], "every mismatch: the same message on both ranks", out)
    want = ("Cannot apply desired operation due to shape mismatches (debug mode): `gather` needs the same "
            "dtype, device and every dim but the first on every process. Operation and input shapes: process 0: "
            "`gather`: float32 [2, 2] on cpu; process 1: `gather`: float32 [2, 3] on cpu")
    expect(lines[0][:1] == [want], "the gather mismatch's message", out)
    # Off (no --debug): no check, no extra collective; the mismatched gather reaches Gloo (ACC_SHM_COLLECTIVES=0).
    p, _ = launch(2, "debug_mode", 0, timeout=120, env_extra={"ACC_SHM_COLLECTIVES": "0"})
    out = p.stdout + p.stderr
    expect(p.returncode != 0 and "rank 0 killed by signal SIGABRT" in out and "rank 0: debug off" not in out
           and "Cannot apply desired operation" not in out, "debug off: the mismatch aborts rank 0 in Gloo", out)
    # ... or the shared-memory collectives of one machine (the default), which compare each step's operation, dtype
    # and size: both ranks get ACC_ERR_DISTRIBUTED naming both all-gathers, and nothing aborts.
    p, _ = launch(2, "debug_mode", 0, timeout=120)
    out = p.stdout + p.stderr
    expect("SIGABRT" not in out and "Cannot apply desired operation" not in out and
           all(re.search(rf"rank {r}: debug off: ACC_ERR_DISTRIBUTED: .*is in another collective \(all_gather of \d+ "
                         r"Float\) than rank", out) for r in (0, 1)),
           "debug off, shared memory: the mismatch fails on both ranks naming both all-gathers", out)


def case_accumulation():
    """Accumulated steps equal one step over the larger batch (MP_WORKER is mp_loop here)."""
    with tempfile.TemporaryDirectory() as d:
        def run(n, batch, accum, micro):
            out = os.path.join(d, f"{n}-{batch}-{accum}.safetensors")
            p, _ = launch(n, "accumulate", batch, accum, micro, out)
            expect(p.returncode == 0, f"accumulate on {n} processes, batch {batch}, {accum} steps", p.stdout + p.stderr)
            return read_safetensors(out) if p.returncode == 0 else None
        for n, batch, accum, micro, big in ((1, 8, 4, 24, 32), (2, 4, 4, 24, 32), (3, 4, 4, 16, 48)):
            acc_run = run(n, batch, accum, micro)
            big_run = run(1, big, 1, micro // accum)
            if acc_run and big_run:
                diff = max_abs_diff(acc_run, big_run)
                print(f"{n} process(es) x batch {batch} x {accum} accumulation steps vs 1 x batch {big}: "
                      f"max |diff| = {diff:.3g}")
                expect(diff <= 1e-5, f"accumulation on {n} processes equals the large batch", f"diff {diff}")


def case_process_control():
    for n in (2, 3, 4):
        with tempfile.TemporaryDirectory() as d:
            p, _ = launch(n, "process_control", d)
            expect(p.returncode == 0, f"process control on {n} processes", p.stdout + p.stderr)


def case_data():
    """Every dataloader_config sharding mode (MP_WORKER data): gather_for_metrics exact, skip exact."""
    # split_batches, even_batches, dispatch_batches (-1: unset), use_seedable_sampler
    modes = ((0, 1, -1, 0), (1, 1, -1, 0), (0, 0, -1, 0), (1, 0, -1, 0), (0, 1, 1, 0), (1, 1, 1, 0),
             (0, 1, 0, 0), (1, 1, 0, 0), (0, 0, 0, 0), (0, 1, -1, 1), (1, 1, 1, 1))
    for n in (2, 3):
        for split, even, dispatch, seedable in modes:
            p, _ = launch(n, "data", split, even, dispatch, seedable)
            what = (f"data loading on {n} processes: split_batches={split}, even_batches={even}, "
                    f"dispatch_batches={'unset' if dispatch < 0 else dispatch}, use_seedable_sampler={seedable}")
            expect(p.returncode == 0, what, p.stdout + p.stderr)


def case_named():
    """Named batches (MP_WORKER named): int64, bool and float tensors of one sample stay together whether
    the loader shards or dispatches, map-style or iterable; gather_for_metrics sees each sample once."""
    for n in (2, 3):
        for dispatch in (0, 1):
            p, _ = launch(n, "named", dispatch)
            expect(p.returncode == 0, f"named batches on {n} processes, dispatch_batches={dispatch}",
                   p.stdout + p.stderr)


def case_data_files():
    """A dataset from files (acc_dataset_from_files) sharded by acc_prepare as any loader: each rank's batches are
    the collated rows a loader over the row numbers gives it (checked in the worker, MP_WORKER mp_data_files); with
    batches that divide the rows, the ranks' rows are disjoint and cover the dataset."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for n in (2, 3):
        for batch, shuffle in ((4, 0), (4, 1), (5, 0)):
            p, _ = launch(n, root, batch, shuffle)
            what = f"files dataset on {n} processes, batch {batch}, shuffle {shuffle}"
            expect(p.returncode == 0, what, p.stdout + p.stderr)
            got = {}
            for line in p.stdout.splitlines():
                if " rows:" in line:
                    rank, rows = line.split(" rows:")
                    got[int(rank.split()[-1])] = [int(r) for r in rows.split()]
            expect(sorted(got) == list(range(n)), f"{what}: every rank reports its rows", p.stdout)
            if 24 % (batch * n) == 0:
                rows = sorted(r for rank_rows in got.values() for r in rank_rows)
                expect(rows == list(range(24)), f"{what}: the shards are disjoint and cover the rows", str(got))
            else:
                # even_batches: every rank as many rows as the others, the missing ones repeated from the start
                counts = {len(v) for v in got.values()}
                expect(len(counts) == 1 and set(r for v in got.values() for r in v) == set(range(24)),
                       f"{what}: equal shards covering the rows", str(got))


PROFILE_RANGES = ("acc::data", "acc::forward", "acc::backward", "acc::gradient_sync", "acc::optimizer_step")


def check_trace(path, rank, recorded, steps, memory):
    """One rank's Chrome trace: valid JSON, aten:: events, a ProfilerStep#N marker for exactly the `recorded` steps
    (None: no schedule, so no markers and every one of `steps` steps recorded) and each of libacc's ranges once per
    recorded step, inside its marker."""
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    what = f"rank {rank}'s trace"
    expect(trace.get("traceName", "").endswith(f"profile_{rank}.json"), f"{what} names its file",
           trace.get("traceName"))
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("name", "").startswith("aten::")]
    expect(len(ops) > 0, f"{what} has aten:: events")
    expect(any("Input Dims" in e.get("args", {}) for e in ops), f"{what}: record_shapes gives the input shapes")
    expect(any(e.get("name") == "[memory]" for e in events) == memory, f"{what}: [memory] events iff profile_memory")
    spans = [e for e in events if e.get("ph") == "X"]
    markers = {int(e["name"][len("ProfilerStep#"):]): e for e in spans if e["name"].startswith("ProfilerStep#")}
    if recorded is None:
        expect(not markers, f"{what}: no step markers without a schedule", str(sorted(markers)))
        n = steps
    else:
        expect(sorted(markers) == recorded, f"{what}: the schedule's recorded steps are {recorded}", str(sorted(markers)))
        n = len(recorded)
    for name in PROFILE_RANGES:
        found = [e for e in spans if e["name"] == name]
        expect(len(found) == n, f"{what}: {name} once per recorded step ({n})", f"{len(found)} found")
        for e in found:
            inside = [s for s, m in markers.items()
                      if m["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= m["ts"] + m["dur"] + 1e-3]
            expect(recorded is None or len(inside) == 1, f"{what}: {name} lies inside a recorded step", str(e))


def case_profile():
    """Accelerate's profile() (MP_WORKER mp_profile): one Chrome trace per process with torch.profiler.schedule's
    steps (the expected ones worked out from torch's schedule_fn and action map: a cycle's RECORD_AND_SAVE ends it,
    and the file holds the last cycle, as export_chrome_trace); bad keys, values and call orders are refused."""
    p, _ = launch(1, "refuse", timeout=120)
    expect(p.returncode == 0, "bad profile_kwargs and call orders are refused by name", p.stdout + p.stderr)
    # (schedule_option, steps, the steps recorded, profile_memory, through acc_profile_begin rather than the config)
    cases = (({"skip_first": 1, "wait": 1, "warmup": 1, "active": 2, "repeat": 1}, 7, [3, 4], False, False),
             ({"wait": 1, "warmup": 1, "active": 1, "repeat": 2}, 8, [5], True, False),
             ({"skip_first": 2, "wait": 3, "warmup": 1, "active": 1, "repeat": 1, "skip_first_wait": 1}, 6, [3],
              False, True),
             (None, 3, None, True, True))
    for schedule, steps, recorded, memory, direct in cases:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "traces")
            kwargs = {"output_trace_dir": out, "record_shapes": True, "profile_memory": memory}
            if schedule is not None:
                kwargs["schedule_option"] = schedule
            config = {"seed": 3} if direct else {"seed": 3, "profile_kwargs": kwargs}
            args = [steps, json.dumps(config)] + ([json.dumps(kwargs)] if direct else [])
            p, _ = launch(2, "train", *args)
            what = f"profile {schedule} over {steps} steps{' (acc_profile_begin)' if direct else ''}"
            expect(p.returncode == 0, what, p.stdout + p.stderr)
            if p.returncode != 0:
                continue
            names = sorted(os.listdir(out))
            expect(names == ["profile_0.json", "profile_1.json"], f"{what}: one trace per process, nothing else",
                   str(names))
            for rank in (0, 1):
                if os.path.exists(os.path.join(out, f"profile_{rank}.json")):
                    check_trace(os.path.join(out, f"profile_{rank}.json"), rank, recorded, steps, memory)
    # with_stack and with_modules: a TorchScript module's call stack and module hierarchy on its aten:: events
    # (libacc's own models are C++ modules, which LibTorch has no such record of; tests/mp/make_profile_net.py).
    net = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "profile_net.pt")
    for flag in (0, 1):
        with tempfile.TemporaryDirectory() as d:
            p, _ = launch(1, "torchscript", net, d, flag)
            expect(p.returncode == 0, f"a TorchScript module profiled with with_stack = with_modules = {flag}",
                   p.stdout + p.stderr)
            if p.returncode != 0:
                continue
            with open(os.path.join(d, "profile_0.json")) as f:
                ops = [e for e in json.load(f)["traceEvents"] if e.get("name", "").startswith("aten::")]
            stacks = [e["args"]["Call stack"] for e in ops if "Call stack" in e.get("args", {})]
            modules = [e["args"]["Module Hierarchy"] for e in ops if "Module Hierarchy" in e.get("args", {})]
            expect(any("forward" in s for s in stacks) == bool(flag), f"with_stack {flag}: TorchScript call stacks",
                   str(stacks[:2]))
            expect(any("inner(Inner)" in m for m in modules) == bool(flag),
                   f"with_modules {flag}: TorchScript module hierarchy", str(modules[:2]))
    # A schedule that records nothing in the steps taken writes no file, and says so.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "traces")
        config = {"profile_kwargs": {"output_trace_dir": out, "schedule_option": {"wait": 5, "warmup": 1, "active": 1}}}
        p, _ = launch(2, "train", 3, json.dumps(config))
        expect(p.returncode == 0 and "recorded no step" in p.stderr and not os.path.exists(os.path.join(out,
               "profile_0.json")), "a schedule that recorded nothing: no trace, a message", p.stdout + p.stderr)


def case_profile_exit():
    """Issue 36: a process that began a profile and ended it without recording aborted at exit ("malloc(): unsorted
    double linked list corrupted") in 12-19 of 30 runs: Kineto's ConfigLoader thread ran into statics exit() had
    already destroyed. 20 such processes alone and 20 under acc launch (2 processes each) exit 0 (at that rate 20 runs
    all pass with a chance under 1e-4), and so do a few whose profile is still running at exit, on the main thread or
    on a thread that returned (SIGSEGV before)."""
    env = dict(os.environ, ACC_CONFIG_FILE="none")
    for how, times in (("end", 20), ("running", 5), ("thread", 5)):
        bad = []
        for i in range(times):
            p = subprocess.run([WORKER, "exit", how], capture_output=True, text=True, timeout=120, env=env)
            if p.returncode != 0:
                bad.append(f"run {i}: exit status {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
        expect(not bad, f"a profile recording nothing ({how}), then exit: {times} processes alone exit 0, "
               f"{len(bad)} did not", "\n".join(bad[:3]))
        bad = []
        for i in range(times):
            p, _ = launch(2, "exit", how, timeout=120)
            if p.returncode != 0:
                bad.append(f"run {i}: exit status {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
        expect(not bad, f"a profile recording nothing ({how}), then exit: {times} runs of 2 processes under acc launch "
               f"exit 0, {len(bad)} did not", "\n".join(bad[:3]))


def case_profile_full_disk():
    """Issue 36: on a full disk acc_profile_end returned ACC_OK, the previous trace became an empty file and a
    temporary file stayed. On a small tmpfs (mounted in a mount namespace of this test's own: root only), full and
    then read-only: ACC_ERR_IO naming the trace file (mp_profile trace checks it), the previous trace byte for byte,
    nothing else left; then, writable again, a new trace replaces it."""
    import shutil
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("skipped: the full disk needs root and unshare (a tmpfs in a mount namespace of its own)")
        return
    if os.environ.get("ACC_TEST_MOUNT_NS") != "1":
        r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, os.path.abspath(__file__),
                            ACC, WORKER, "profile_full_disk"], env=dict(os.environ, ACC_TEST_MOUNT_NS="1"),
                           capture_output=True, text=True, timeout=240)
        sys.stdout.write(r.stdout)
        expect(r.returncode == 0, "the trace on a full and a read-only disk (in a mount namespace)", r.stdout + r.stderr)
        return
    mnt = tempfile.mkdtemp(prefix="acc-profile-disk-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "acc-test", mnt], check=True)
    env = dict(os.environ, ACC_CONFIG_FILE="none")
    try:
        out = os.path.join(mnt, "traces")
        trace = os.path.join(out, "profile_0.json")

        def run(status):
            p = subprocess.run([WORKER, "trace", out, status], capture_output=True, text=True, timeout=120, env=env)
            return p.returncode == 0, p.stdout + p.stderr

        ok, text = run("ok")
        expect(ok and os.path.exists(trace), "a first trace on the small disk", text)
        with open(trace, "rb") as f:
            before = f.read()
        expect(json.loads(before).get("traceName") == trace, "the trace is JSON and names its own file",
               before[-200:].decode(errors="replace"))

        def kept(what):
            left = sorted(os.listdir(out)) + sorted(set(os.listdir(mnt)) - {"traces"})
            with open(trace, "rb") as f:
                same = f.read() == before
            expect(same and left == ["profile_0.json"], f"{what}: the previous trace kept, nothing else left",
                   f"same: {same}; entries: {left}")

        filler = os.path.join(mnt, "filler")
        with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
            try:
                while True:
                    f.write(b"\0" * (1 << 16))
            except OSError:
                pass
        ok, text = run("io")
        expect(ok, "on a full disk: acc_profile_end is ACC_ERR_IO naming the trace file", text)
        os.remove(filler)
        kept("on a full disk")
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        ok, text = run("io")
        expect(ok, "on a read-only disk: acc_profile_end is ACC_ERR_IO naming the trace file", text)
        subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
        kept("on a read-only disk")
        ok, text = run("ok")
        with open(trace, "rb") as f:
            expect(ok and f.read() != before and sorted(os.listdir(out)) == ["profile_0.json"],
                   "writable again: a new trace replaces the previous one", text)
    finally:
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)

def case_mesh():
    """Issue 27: the process mesh of 4 processes in Accelerate's layouts, from the variables accelerate launch exports
    (and once from a launch config file), tensor and context parallelism among them (their model transforms run in
    prepare, which this test calls for loaders only);
    sizes Accelerate refuses stop acc launch before any process starts."""
    def env_of(r, s, c, t, fsdp2):
        e = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": str(r),
             "PARALLELISM_CONFIG_DP_SHARD_SIZE": str(s), "PARALLELISM_CONFIG_CP_SIZE": str(c),
             "PARALLELISM_CONFIG_TP_SIZE": str(t)}
        if fsdp2:
            e.update(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")
        return e

    for r, s, c, t in ((2, 2, 1, 1), (1, 2, 1, 2), (1, 2, 2, 1), (1, 1, 1, 4), (1, 1, 2, 2), (4, 1, 1, 1)):
        p, _ = launch(4, r, s, c, t, env_extra=env_of(r, s, c, t, fsdp2=s > 1 or c > 1))
        expect(p.returncode == 0 and "0 failed" in p.stdout, f"mesh dp_replicate {r} x dp_shard {s} x cp {c} x tp {t}",
               p.stdout + p.stderr)
    # HSDP 2 x 2 from a launch config file, as accelerate config writes it.
    fsdp2 = "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
    p, _ = launch(4, 2, 2, 1, 1, config=fsdp2 + "parallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
                  "  parallelism_config_dp_shard_size: 2\n")
    expect(p.returncode == 0 and "0 failed" in p.stdout, "mesh 2 x 2 from a launch config file", p.stdout + p.stderr)
    # Sizes Accelerate refuses: acc launch stops before any process starts (the worker never prints).
    for sizes, np, words in (("  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 4\n", 4,
                              "the parallelism_config sizes multiply to 8 processes"),
                             ("  parallelism_config_dp_replicate_size: 2\n  parallelism_config_cp_size: 2\n", 4,
                              "cannot be used with pure data parallelism")):
        p, _ = launch(np, 1, 1, 1, 1, config=fsdp2 + "parallelism_config:\n" + sizes)
        expect(p.returncode != 0 and words in p.stderr and "passed" not in p.stdout
               and "parallelism_config.parallelism_config_" in p.stderr, f"acc launch refuses: {words}",
               p.stdout + p.stderr)


def train_layouts(label, model, layouts, d):
    """mp_cp_train's 20 steps of `model` under each layout (name, processes, batch, environment[, acc launch's
    arguments]), into folders of d: name -> (losses, saved tensors) of those that ran."""
    runs = {}
    for name, n, batch, env, *launcher_args in layouts:
        name = f"{label}, {name}"
        out = os.path.join(d, str(len(runs)))
        p, _ = launch(n, 20, batch, out, model, env_extra=env, launcher_args=tuple(*launcher_args))
        losses = [float(v) for v in re.findall(r"^LOSS \d+ (\S+)$", p.stdout, re.M)]
        ok = p.returncode == 0 and len(losses) == 20
        expect(ok, f"{name}: 20 steps and the model saved", p.stdout + p.stderr)
        losses += [float(v) for v in re.findall(r"^EVAL (\S+)$", p.stdout, re.M)]  # with MP_EVAL: compared too
        losses += [float(v) for v in re.findall(r"^SCALE \d+ (\S+)$", p.stdout, re.M)]  # with MP_SCALE: too
        if ok:
            runs[name] = (losses, read_safetensors(os.path.join(out, "model.safetensors")))
    return runs


def compare_with_one_process(label, runs, tolerance=1e-5):
    """runs: name -> (losses, saved tensors), one of them "<label>, one process": each other run's loss at every step
    within `tolerance` (relative) of its, and the parameters after the last step within it; training changed the
    loss."""
    reference = f"{label}, one process"
    if reference not in runs:
        return
    losses, params = runs[reference]
    for name, (l, w) in runs.items():
        if name == reference:
            continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(l, losses))
        assert w.keys() == params.keys(), (w.keys(), params.keys())
        diff = max(abs(x - y) for k in w for x, y in zip(w[k], params[k]))
        print(f"{name}: worst relative loss difference {worst:.3g}, parameters {diff:.3g}")
        expect(worst <= tolerance, f"{name}: the loss at every step within {tolerance:g} of one process's",
               f"{l} vs {losses}")
        expect(diff <= tolerance, f"{name}: the parameters after 20 steps within {tolerance:g} of one process's",
               str(diff))
    expect(abs(losses[0] - losses[-1]) > 1e-2 * abs(losses[0]), f"{label}: training changed the loss", str(losses))


def case_context_parallel_training():
    """Issue 27 item 5 for context parallelism (WORKER: mp_cp_train): a Llama (GQA), a Mixtral and a GPT-2, and the
    Llama and Mixtral fixtures (transformers' checkpoints), each trained 20 SGD steps through the
    public API on 4 processes, cp=2 x dp_shard=2 (FSDP2) and cp=2 x tp=2, each with cp_comm_strategy allgather and
    alltoall, against one process on the same global batch (4 sequences): the loss at every step within 1e-5
    (relative) and the saved parameters after 20 steps within 1e-5; the fixtures' pad row (pad_token_id 0, in the
    data: the embedding's padding_idx) stays zero; refusals by name through the API."""
    base = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2",
            "PARALLELISM_CONFIG_CP_SIZE": "2"}
    layouts = [("one process", 1, 4, {})]
    for strategy in ("allgather", "alltoall"):
        layouts.append((f"cp=2 x dp_shard=2, {strategy}", 4, 2,
                        dict(base, PARALLELISM_CONFIG_DP_SHARD_SIZE="2", PARALLELISM_CONFIG_CP_COMM_STRATEGY=strategy)))
        layouts.append((f"cp=2 x tp=2, {strategy}", 4, 4,
                        dict(base, PARALLELISM_CONFIG_TP_SIZE="2", PARALLELISM_CONFIG_CP_COMM_STRATEGY=strategy)))
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf", "fixtures")
    for model in ("llama", "mixtral", "gpt2", os.path.join(fixtures, "llama", "model"),
                  os.path.join(fixtures, "mixtral", "model")):
        label = model if os.sep not in model else os.path.basename(os.path.dirname(model)) + " fixture"
        with tempfile.TemporaryDirectory() as d:
            runs = train_layouts(label, model, layouts, d)
            if os.sep in model:
                # The fixtures' pad token (id 0, in the data; its row zero in the checkpoint) is the embedding's
                # padding_idx, as in transformers: no gradient, so the row stays zero in every layout.
                with open(os.path.join(model, "config.json")) as f:
                    config = json.load(f)
                hidden, pad = config["hidden_size"], config["pad_token_id"]
                for name, (_, w) in runs.items():
                    row = w["model.embed_tokens.weight"][pad * hidden:(pad + 1) * hidden]
                    expect(not any(row), f"{name}: the pad row ({pad}) stays zero", str(max(map(abs, row))))
            compare_with_one_process(label, runs)
    # A model without context-parallel attention refused by prepare, by key and source; a length CP cannot split.
    p, _ = launch(4, "refuse", env_extra=dict(base, PARALLELISM_CONFIG_DP_SHARD_SIZE="2"))
    expect(p.returncode == 0 and "0 failed" in p.stdout, "refusals through the API", p.stdout + p.stderr)


def case_sequence_parallel_training():
    """Issue 40 item 5 (WORKER: mp_cp_train): Ulysses sequence parallelism through the public API, the layout from the
    variables accelerate launch exports. A Llama (GQA), a GPT-2 and the Llama fixture trained 20 SGD steps on 4
    processes, sp=2 x dp_shard=2 (FSDP2), sp=2 x tp=2 (FSDP2's dimension given by sp) and sp=4 under DDP (the
    fixture's 2 key/value heads repeated for 4 ranks), against one process on the same global batch (4 sequences):
    the loss at every step within 1e-5 (relative) and the saved parameters after 20 steps within 1e-5; refusals by
    name through the API."""
    base = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_SP_SIZE": "2"}
    fsdp2 = dict(base, ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")
    layouts = [("one process", 1, 4, {}),
               ("sp=2 x dp_shard=2", 4, 2, dict(fsdp2, PARALLELISM_CONFIG_DP_SHARD_SIZE="2")),
               ("sp=2 x tp=2", 4, 4, dict(fsdp2, PARALLELISM_CONFIG_TP_SIZE="2")),
               ("sp=4, DDP", 4, 4, dict(base, PARALLELISM_CONFIG_SP_SIZE="4"))]
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf", "fixtures")
    for model in ("llama", "gpt2", os.path.join(fixtures, "llama", "model")):
        label = model if os.sep not in model else "llama fixture"
        with tempfile.TemporaryDirectory() as d:
            compare_with_one_process(label, train_layouts(label, model, layouts, d))
    p, _ = launch(4, "refuse-sp", env_extra=dict(base, PARALLELISM_CONFIG_SP_SIZE="4"))
    expect(p.returncode == 0 and "0 failed" in p.stdout, "refusals through the API", p.stdout + p.stderr)


def case_pipeline_parallel_training():
    """Issue 40 items 1-3 (WORKER: mp_cp_train): pipeline parallelism through the public API, the layout from the
    variables accelerate launch exports (libacc's own PARALLELISM_CONFIG_PP_*). A Llama (GQA, 2 blocks) and a GPT-2
    (its head tied to the embedding) trained 20 SGD steps, 2 micro-batches, under GPipe, 1F1B, Interleaved1F1B and
    InterleavedZeroBubble (2 stages per rank: 4 stages), each with pp=2 on 2 processes and pp=2 x dp_shard=2 (FSDP2)
    and pp=2 x tp=2 on 4, and pp=2 x DDP (dp_replicate=2), and split at a block named, against one process on the same
    global batch (4 sequences): the loss at every step within 1e-5 (relative) and the whole model acc_save_model writes (every stage's parameters, gathered) within 1e-5.
    Then gradient accumulation with clipping (the norm over every stage, shard and slice, a tied head counted once)
    and activation checkpointing under each composition; bf16 and fp16 (its loss scale reaching the backward inside
    the step); refusals by name."""
    # MP_EVAL: after the 20 steps, the next batch's loss in evaluation mode (the pipeline's eval_step), compared too.
    base = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_PP_SIZE": "2",
            "PARALLELISM_CONFIG_PP_MICROBATCHES": "2", "MP_EVAL": "1"}
    fsdp2 = dict(base, ACCELERATE_USE_FSDP="true", FSDP_VERSION="2", PARALLELISM_CONFIG_DP_SHARD_SIZE="2")
    tp2 = dict(base, PARALLELISM_CONFIG_TP_SIZE="2")
    layouts = [("one process", 1, 4, {"MP_EVAL": "1"})]
    for schedule, per_rank in (("GPipe", "1"), ("1F1B", "1"), ("Interleaved1F1B", "2"), ("InterleavedZeroBubble", "2")):
        sched = {"PARALLELISM_CONFIG_PP_SCHEDULE": schedule, "PARALLELISM_CONFIG_PP_STAGES_PER_RANK": per_rank}
        layouts += [(f"pp=2 {schedule}", 2, 4, dict(base, **sched)),
                    (f"pp=2 x dp_shard=2 {schedule}", 4, 2, dict(fsdp2, **sched)),
                    (f"pp=2 x tp=2 {schedule}", 4, 4, dict(tp2, **sched))]
    layouts.append(("pp=2 x dp_replicate=2", 4, 2, dict(base, PARALLELISM_CONFIG_DP_REPLICATE_SIZE="2")))
    for model, block in (("llama", "model.layers.1"), ("gpt2", "transformer.h.1")):  # a split point by name too
        named = (f"pp=2 split at {block}", 2, 4, dict(base, PARALLELISM_CONFIG_PP_SPLIT_POINTS=block))
        with tempfile.TemporaryDirectory() as d:
            compare_with_one_process(model, train_layouts(model, model, layouts + [named], d))
    # Gradient accumulation (2 micro-steps, synchronisation skipped on the first) and clipping through the same loop,
    # activation checkpointing (FSDP's) on the sharded layout, against one process doing the same.
    more = {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2", "MP_CLIP": "1"}  # (the norms are about 3)
    layouts = [("one process", 1, 4, more), ("pp=2 1F1B", 2, 4, dict(base, **more)),
               ("pp=2 x dp_replicate=2", 4, 2, dict(base, PARALLELISM_CONFIG_DP_REPLICATE_SIZE="2", **more)),
               ("pp=2 x dp_shard=2, activation checkpointing", 4, 2,
                dict(fsdp2, FSDP_ACTIVATION_CHECKPOINTING="true", **more)),
               ("pp=2 x tp=2", 4, 4, dict(tp2, **more))]
    for model in ("llama", "gpt2"):
        label = f"{model}, accumulation 2 and clipping"
        with tempfile.TemporaryDirectory() as d:
            compare_with_one_process(label, train_layouts(label, model, layouts, d))
    # Mixed precision: one micro-batch (GPipe), so that every matrix product has one process's shapes; bf16 within
    # 1e-5, fp16 within its unit roundoff, 4.9e-4 (GPT-2's tied head: its two gradients rounded apart before they are
    # summed; 6.8e-5 here after 20 steps, more on CPUs whose kernels round otherwise), and fp16's loss scale after
    # every step (MP_SCALE) one process's too.
    one = dict(base, PARALLELISM_CONFIG_PP_MICROBATCHES="1", PARALLELISM_CONFIG_PP_SCHEDULE="GPipe")
    # fp16 starts at a loss scale of 2^24, so that its first steps overflow and are skipped (the decision every rank's).
    fp16 = {"MP_SCALE": "1", "MP_INIT_SCALE": str(2 ** 24)}
    for precision, tolerance, scale in (("bf16", 1e-5, {}), ("fp16", 4.9e-4, fp16)):
        args = ("--mixed_precision", precision)
        layouts = [("one process", 1, 4, dict(scale, MP_EVAL="1"), args), ("pp=2", 2, 4, dict(one, **scale), args)]
        for model in ("llama", "gpt2"):
            label = f"{model}, {precision}"
            with tempfile.TemporaryDirectory() as d:
                runs = train_layouts(label, model, layouts, d)
                compare_with_one_process(label, runs, tolerance)
            if scale and f"{label}, one process" in runs:
                scales = runs[f"{label}, one process"][0][-20:]  # after each step
                expect(scales[0] < 2 ** 24, f"{label}: the first step overflowed and was skipped (its scale halved)",
                       str(scales))
    for n in (2, 3):
        p, _ = launch(n, "refuse-pp", n, env_extra=base)
        expect(p.returncode == 0 and "0 failed" in p.stdout, f"refusals through the API on {n} processes",
               p.stdout + p.stderr)


def case_cxx_data_objects():
    """The C++ API (tests/mp/mp_cxx.cpp): named loaders sharded, gather_object(_for_metrics) and
    broadcast_object between real processes."""
    for n in (2, 3):
        p, _ = launch(n)
        expect(p.returncode == 0, f"C++ API data and objects on {n} processes", p.stdout + p.stderr)


def case_checkpoint_resume():
    """Exact resume (MP_WORKER: mp_checkpoint): k micro-steps, save_state, SIGKILL, relaunch, load_state,
    continue to N; the weights equal the uninterrupted run's bit for bit, on 1, 2 and 3 processes."""
    total = 24
    for n in (1, 2, 3):
        with tempfile.TemporaryDirectory() as d:
            full, resumed, ckpt = (os.path.join(d, x) for x in ("full.safetensors", "resumed.safetensors", "ckpt"))
            p, _ = launch(n, "full", total, full)
            expect(p.returncode == 0, f"uninterrupted run on {n} processes", p.stdout + p.stderr)
            p, _ = launch(n, "crash", total, 11, ckpt)
            expect(p.returncode != 0, f"the job on {n} processes was killed after its save", p.stdout + p.stderr)
            staged = os.path.join(d, ".ckpt.acc-staging")
            expect(os.path.exists(os.path.join(ckpt, "manifest.json")) and not os.path.exists(staged),
                   f"the checkpoint of {n} processes is complete and in place", str(os.listdir(d)))
            p, _ = launch(n, "resume", total, ckpt, resumed)
            expect(p.returncode == 0, f"resumed run on {n} processes", p.stdout + p.stderr)
            same = (os.path.exists(full) and os.path.exists(resumed)
                    and open(full, "rb").read() == open(resumed, "rb").read())
            expect(same, f"resumed weights equal the uninterrupted run's bit for bit on {n} processes")
            # Automatic resume: a rank SIGKILLed mid-training, the launcher restarts the job, which resumes from
            # its newest checkpoint (resume_from_checkpoint: "latest") and ends with the same weights.
            project, auto = os.path.join(d, "project"), os.path.join(d, "auto.safetensors")
            os.makedirs(project)
            p, _ = launch(n, "auto", total, project, auto, launcher_args=("--max_restarts", "3"))
            expect(p.returncode == 0, f"automatic resume on {n} processes", p.stdout + p.stderr)
            expect(os.path.exists(os.path.join(project, "killed")), f"a rank of {n} was killed once")
            same = os.path.exists(auto) and open(full, "rb").read() == open(auto, "rb").read()
            expect(same, f"after the restart, the weights equal the uninterrupted run's on {n} processes")
    # With a LoRA adapter (dropout in the branch too): the checkpoint holds what trains, not the frozen base, and
    # the resume is exact on 2 processes.
    lora = {"MP_LORA": '{"r": 4, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": ["c_attn", "c_fc"], '
                       '"modules_to_save": ["ln_f"]}'}
    with tempfile.TemporaryDirectory() as d:
        full, resumed, ckpt = (os.path.join(d, x) for x in ("full.safetensors", "resumed.safetensors", "ckpt"))
        p, _ = launch(2, "full", total, full, env_extra=lora)
        expect(p.returncode == 0, "uninterrupted run with an adapter", p.stdout + p.stderr)
        p, _ = launch(2, "crash", total, 11, ckpt, env_extra=lora)
        expect(p.returncode != 0, "the job with an adapter was killed after its save", p.stdout + p.stderr)
        p, _ = launch(2, "resume", total, ckpt, resumed, env_extra=lora)
        expect(p.returncode == 0, "resumed run with an adapter", p.stdout + p.stderr)
        same = (os.path.exists(full) and os.path.exists(resumed)
                and open(full, "rb").read() == open(resumed, "rb").read())
        expect(same, "with an adapter, the resumed weights equal the uninterrupted run's bit for bit on 2 processes")
        held = sorted(read_safetensors(os.path.join(ckpt, "model.safetensors"))) \
            if os.path.exists(os.path.join(ckpt, "model.safetensors")) else []
        every = sorted(read_safetensors(full)) if os.path.exists(full) else []
        expect(held and all(".lora_" in k or k.startswith("transformer.ln_f.") for k in held) and
               len([k for k in every if ".lora_" in k]) == 4 and len(held) == 4 + 2,
               "the checkpoint holds the adapter's weights and the module saved whole (ln_f), not the frozen base",
               f"{held} of {len(every)}")


def job_pids(proc):
    """The launcher's pid and those of every process under it."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    doomed, todo = [], [proc.pid]
    while todo:
        pid = todo.pop()
        doomed.append(pid)
        todo.extend(children.get(pid, []))
    return doomed


def kill_job(proc, pids=None):
    """SIGKILLs a launcher and every process under it at once (a pre-empted machine: nobody cleans up)."""
    for pid in pids or job_pids(proc):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def staged_saves(root):
    """The checkpoints being staged under root (.checkpoint_N.acc-staging): a save in progress."""
    try:
        return {c for c in os.listdir(root) if c.endswith(".acc-staging")}
    except OSError:
        return set()


def kill_inside_a_save(proc, root, target, rng):
    """Watches root while the job saves a checkpoint at every synchronizing step and SIGKILLs it a random time
    into the save of checkpoint_{target} (or a later one, should that save be over before it is seen), the time
    drawn within how long its earlier saves took. Returns whether the kill left a staged checkpoint behind."""
    began, took, pids = {}, [], None
    while proc.poll() is None:
        now = time.perf_counter()
        staged = staged_saves(root)
        for c in staged:
            began.setdefault(c, now)
        for c in [c for c in began if c not in staged]:
            took.append(now - began.pop(c))
        if staged and pids is None:
            pids = job_pids(proc)  # the workers are up: listed now, so that the kill itself is immediate
        if any(int(c[len(".checkpoint_"):-len(".acc-staging")]) >= target for c in staged):
            typical = sorted(took)[len(took) // 2] if took else 0.002
            time.sleep(rng.uniform(0, 0.9 * typical))
            kill_job(proc, pids)
            return bool(staged_saves(root))
        time.sleep(0.0002)
    return False


def case_checkpoint_crash_safety():
    """The job SIGKILLed at 20 random moments inside its saves (it saves a checkpoint at every synchronizing
    step; each kill lands a random time into a randomly chosen save): each time the newest complete checkpoint
    loads (a partial one is never picked) and, run to the end, the weights equal an uninterrupted run's; no
    partial checkpoint is left once the run completes."""
    import random
    rng = random.Random(20261123)
    total, n = 24, 2
    with tempfile.TemporaryDirectory() as d:
        full = os.path.join(d, "full.safetensors")
        p, _ = launch(n, "full", total, full)
        expect(p.returncode == 0, "uninterrupted run", p.stdout + p.stderr)
        inside_saves = 0
        for k in range(20):
            project, out = os.path.join(d, f"p{k}"), os.path.join(d, f"w{k}.safetensors")
            os.makedirs(project)
            cmd = [ACC, "launch", "--cpu", "--num_processes", str(n), "--main_process_port", "0", WORKER,
                   "saveloop", str(total), project, out]
            env = dict(os.environ, ACC_CONFIG_FILE="none")
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            # total micro-steps with accumulation 2: total / 2 saves, checkpoint_0 to checkpoint_{total/2 - 1}
            inside_saves += kill_inside_a_save(proc, os.path.join(project, "checkpoints"),
                                               rng.randint(1, total // 2 - 2), rng)
            proc.wait()
            p, _ = launch(n, "saveloop", total, project, out)
            expect(p.returncode == 0, f"kill {k}: the run resumed and completed", p.stdout + p.stderr)
            same = os.path.exists(out) and open(full, "rb").read() == open(out, "rb").read()
            expect(same, f"kill {k}: the weights equal the uninterrupted run's")
            root = os.path.join(project, "checkpoints")
            left = sorted(os.listdir(root)) if os.path.isdir(root) else []
            partial = [c for c in left if not os.path.exists(os.path.join(root, c, "manifest.json"))]
            expect(not partial, f"kill {k}: no partial checkpoint left", str(left))
        print(f"20 kills, {inside_saves} of them inside a save (a staged checkpoint left behind)")
        expect(inside_saves >= 14, "most kills land inside a save", f"{inside_saves} of 20")


def case_cpp_api():
    """examples/cpp/train_custom (a user-defined torch::nn::Module through acc/torch.hpp, with its own
    AdamW and StepLR, clipping and accumulation): DDP on 2 processes equals 1 process on the full batch, and
    ZeRO-2, ZeRO-3 and FSDP (the module gathered whole: it reports no blocks) equal DDP."""
    with tempfile.TemporaryDirectory() as d:
        for accum in (1, 2):
            runs = {}
            for n, steps, config in ((2, 40, None), (1, 40, None), (1, 0, None), (2, 40, "zero2"), (2, 40, "zero3"),
                                     (2, 40, "full_shard")):
                out = os.path.join(d, f"{accum}-{n}-{steps}-{config}")
                body = SHARDED_CONFIGS[config].replace("{wrap}", "NO_WRAP") if config else None
                p, _ = launch(n, "--steps", steps, "--accum", accum, "--out", out, config=body)
                expect(p.returncode == 0, f"train_custom on {n} processes, accum {accum}, {config or 'DDP'}",
                       p.stdout + p.stderr)
                if p.returncode != 0:
                    return
                runs[(n, steps, config)] = read_safetensors(os.path.join(out, "model.safetensors"))
            expect(sorted(runs[(1, 0, None)]) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "norm.bias",
                                                  "norm.weight"], "the module's own parameter names",
                   str(sorted(runs[(1, 0, None)])))
            diff = max_abs_diff(runs[(2, 40, None)], runs[(1, 40, None)])
            moved = max_abs_diff(runs[(1, 40, None)], runs[(1, 0, None)])
            print(f"C++ API, accum {accum}: 2 processes vs 1 after 40 steps: max |diff| = {diff:.3g}; "
                  f"parameters moved by up to {moved:.3g}")
            expect(diff <= 1e-6, f"accum {accum}: DDP equals single-process training", f"max abs diff {diff}")
            expect(moved > 1e-2, f"accum {accum}: training changed the parameters", f"moved {moved}")
            for config in ("zero2", "zero3", "full_shard"):
                diff = max_abs_diff(runs[(2, 40, config)], runs[(2, 40, None)])
                print(f"C++ API, accum {accum}: {config} vs DDP on 2 processes: max |diff| = {diff:.3g}")
                expect(diff <= 1e-6, f"accum {accum}: {config} equals DDP", f"max abs diff {diff}")


def case_hf_finetune():
    """examples/c/finetune_llama (transformers' LlamaForCausalLM from a config, named forward with labels,
    AdamW, gradient clipping): 2 processes with batch 4 end with the weights of 1 process with batch 8 (within
    5e-5: see below), and both save a Hugging Face directory (config.json, model.safetensors) that loads back. With
    --lora (a LoRA adapter on the frozen base) likewise: the adapters equal, and each loads back and generates."""
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "text")
        os.makedirs(text)
        with open(os.path.join(text, "a.txt"), "w") as f:
            f.write("Permission is hereby granted, free of charge, to any person obtaining a copy. " * 40)
        runs = {}
        for n, batch in ((2, 4), (1, 8)):
            out = os.path.join(d, f"run{n}")
            p, _ = launch(n, "--steps", 20, "--batch", batch, "--out", out, "--text-dir", text, "--new-tokens", 8)
            expect(p.returncode == 0, f"finetune_llama on {n} processes", p.stdout + p.stderr)
            if p.returncode != 0:
                return
            expect(os.path.exists(os.path.join(out, "model", "config.json")), "config.json written")
            runs[n] = read_safetensors(os.path.join(out, "model", "model.safetensors"))
            # The saved directory starts a new run (acc_model_from_pretrained).
            p, _ = launch(1, "--steps", 1, "--batch", 2, "--out", os.path.join(d, f"again{n}"), "--text-dir", text,
                          "--from", os.path.join(out, "model"), "--new-tokens", 4)
            expect(p.returncode == 0, "a saved model loads back", p.stdout + p.stderr)
        diff = max_abs_diff(runs[2], runs[1])
        print(f"LlamaForCausalLM, 20 AdamW steps: 2 processes x 4 vs 1 process x 8: max |diff| = {diff:.3g}")
        # AdamW's first step is about lr * sign(g): a gradient near its eps (1e-8) turns fp32 rounding of the two
        # reduction orders (a mean of two means of 4, one mean of 8) into up to 1.2e-5 here, from step 1 on and
        # not growing; a gradient not averaged, or another sample order, moves weights by lr = 3e-3.
        expect(diff <= 5e-5, "DDP equals single-process training", f"max abs diff {diff}")
        # --lora: the adapter alone trains (DDP over the trainable parameters only), saved as peft's files, loaded
        # back onto the saved base to generate; 2 processes x 4 end with the adapter of 1 x 8 as above.
        adapters = {}
        for n, batch in ((2, 4), (1, 8)):
            out = os.path.join(d, f"lora{n}")
            p, _ = launch(n, "--steps", 20, "--batch", batch, "--out", out, "--text-dir", text, "--new-tokens", 8,
                          "--lora")
            expect(p.returncode == 0, f"finetune_llama --lora on {n} processes", p.stdout + p.stderr)
            if p.returncode != 0:
                return
            expect(f"loaded {out}/adapter onto {out}/model" in p.stdout, "the adapter loads onto the base", p.stdout)
            adapters[n] = read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"))
        diff = max_abs_diff(adapters[2], adapters[1])
        print(f"LoRA adapter, 20 AdamW steps: 2 processes x 4 vs 1 process x 8: max |diff| = {diff:.3g}")
        expect(diff <= 5e-5, "DDP of the adapter equals single-process training", f"max abs diff {diff}")


def case_trackers():
    """tests/c/test_trackers' run on 2 processes: only the main process writes (one TensorBoard event
    file, one MLflow run, one W&B run, each JSON line and CSV row once); the other process's calls return ACC_OK."""
    import glob
    with tempfile.TemporaryDirectory() as d:
        p, _ = launch(2, "run", d)
        expect(p.returncode == 0, "test_trackers run on 2 processes", p.stdout + p.stderr)
        if p.returncode != 0:
            return
        events = glob.glob(os.path.join(d, "demo", "events.out.tfevents.*"))
        expect(len(events) == 1, "one TensorBoard event file", events)
        runs = [r for r in glob.glob(os.path.join(d, "mlruns", "*", "*", "meta.yaml"))]
        expect(len(runs) == 1, "one MLflow run", runs)
        wandb_runs = glob.glob(os.path.join(d, "wandb", "offline-run-*", "run-*.wandb"))
        expect(len(wandb_runs) == 1, "one W&B offline run", wandb_runs)
        with open(os.path.join(d, "demo", "metrics.jsonl")) as f:
            rows = f.read().splitlines()
        expect(len(rows) == 12, "each JSON line once", len(rows))
        with open(os.path.join(d, "demo", "metrics.csv")) as f:
            lines = f.read().splitlines()
        expect(len(lines) == 13, "a CSV header and each row once", len(lines))

def case_save_model():
    """tests/c/test_save_model's prepared run on 2 processes: every process calls acc_save_model, the main
    process writes the shards and the index once, the call returns on every process only when they are complete,
    and a save the main process cannot write fails everywhere."""
    import json
    with tempfile.TemporaryDirectory() as d:
        p, _ = launch(2, "prepared", d)
        expect(p.returncode == 0, "test_save_model prepared on 2 processes", p.stdout + p.stderr)
        if p.returncode != 0:
            return
        out = os.path.join(d, "out")
        expect(sorted(os.listdir(out)) == ["model.safetensors"], "the last save's one file", os.listdir(out))
        ref = read_safetensors(os.path.join(d, "reference.safetensors"))
        got = read_safetensors(os.path.join(out, "model.safetensors"))
        expect(set(got) == set(ref) and max_abs_diff(got, ref) == 0, "model.safetensors holds the model's state")


SHARDED_CONFIGS = {
    # name: (Accelerate config file body, its wrap policy per model); every file also says use_cpu: true
    "zero1": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n",
    "zero2": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n",
    "zero3": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: false\n",
    "full_shard": "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_sharding_strategy: FULL_SHARD\n"
                  "  fsdp_auto_wrap_policy: {wrap}\n",
    "shard_grad_op": "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"
                     "  fsdp_auto_wrap_policy: {wrap}\n",
    # prefetching: the next unit's all-gather in flight during this unit's forward and after its backward (FSDP1's
    # keys; FSDP2 above and DeepSpeed ZeRO-3 prefetch before each backward)
    "full_shard_prefetch": "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_sharding_strategy: FULL_SHARD\n"
                           "  fsdp_forward_prefetch: true\n  fsdp_backward_prefetch: BACKWARD_POST\n"
                           "  fsdp_auto_wrap_policy: {wrap}\n",
    # CPU offload: the masters, their gradients and the optimizer state in CPU memory (the same device here)
    "zero2_offload": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: cpu\n",
    "full_shard_offload": "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
                          "  fsdp_offload_params: true\n  fsdp_auto_wrap_policy: {wrap}\n",
}
# tests/mp/mp_sharded.c's llama, as a config.json.
LLAMA_CONFIG = ('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 37, "hidden_size": 16, '
                '"intermediate_size": 20, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, '
                '"max_position_embeddings": 16, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu", '
                '"initializer_range": 0.02, "tie_word_embeddings": false}')
WRAP = {"gpt": "TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: GPT2Block",
        "llama": "TRANSFORMER_BASED_WRAP",  # the model's _no_split_modules: LlamaDecoderLayer
        "mlp": "SIZE_BASED_WRAP\n  fsdp_min_num_params: 50"}


def launch_sharded(d, n, config, *args, extra_config=None, env_extra=None):
    """Runs tests/mp/mp_sharded.c (args: MODEL STEPS ACCUM CLIP [LOAD SAVE]) on n processes under `config` (a name
    in SHARDED_CONFIGS, "ddp", or a config file's text), writing into d; returns (its saved weights or None, its
    stdout)."""
    label = config if config in SHARDED_CONFIGS or config == "ddp" else f"custom{abs(hash(config))}"
    out = os.path.join(d, f"{n}-{label}-" + "-".join(map(str, args)).replace("/", "_"))
    cmd = [ACC, "launch", "--num_processes", str(n), "--main_process_port", "0"]
    if config == "ddp":
        cmd.append("--cpu")
    else:
        path = os.path.join(d, label + ".yaml")
        with open(path, "w") as f:
            f.write(SHARDED_CONFIGS.get(config, config).replace("{wrap}", WRAP[args[0]]) + "use_cpu: true\n")
        cmd += ["--config_file", path]
    args = list(map(str, args))
    env = dict(os.environ, ACC_CONFIG_FILE="none", **({"MP_EXTRA_CONFIG": extra_config} if extra_config else {}),
               **(env_extra or {}))
    p = subprocess.run(cmd + [WORKER, *args[:4], out, *args[4:]], capture_output=True, text=True, timeout=300, env=env)
    expect(p.returncode == 0, f"{config} on {n} processes, {args}", p.stdout + p.stderr)
    if p.returncode != 0:
        return None, p.stdout
    saved = read_safetensors(os.path.join(out, "model.safetensors"))
    # acc_model_save_safetensors and acc_model_state_get (gathered under ZeRO-3 / FSDP) give acc_save_model's tensors.
    state = read_safetensors(os.path.join(out, "state.safetensors"))
    total = float(re.search(r"STATESUM (\S+)", p.stdout).group(1)) if "STATESUM" in p.stdout else None
    want = sum(float(sum(v)) for v in saved.values())
    expect(sorted(state) == sorted(saved) and max_abs_diff(state, saved) == 0 and total is not None and
           abs(total - want) <= 1e-6 * max(1.0, abs(want)),
           f"{config} on {n} processes: the state getters give the saved model", f"{total} vs {want}")
    return saved, p.stdout


def case_sharded():
    """ZeRO stages 1-3 and FSDP FULL_SHARD / SHARD_GRAD_OP, each chosen by an Accelerate config file as a user
    writes it, end with DDP's parameters after 50 AdamW steps (tests/mp/mp_sharded.c: the MLP's 121 parameters
    divide by no world size; the GPT has a tied embedding and is wrapped per block), on 2, 3 and 4 processes,
    with and without accumulation and clipping, within 1e-6. On 2 processes without clipping the parameters are
    DDP's bit for bit (each parameter's piece is stepped as DDP steps the whole parameter); on 3 and 4, Gloo's
    reduce-scatter and all-reduce add the ranks' gradients in different orders, and the clipping norm is summed
    over shards, so the last bits differ. lr 1e-3: AdamW scales such differences by the lr (at 1e-2 they reach
    3e-6 in 50 steps), and the GPT has no linear biases, whose attention-key part has a gradient of pure rounding
    noise that AdamW turns into lr-sized steps (with it, even two runs of DDP differing in one bit diverge)."""
    with tempfile.TemporaryDirectory() as d:
        def run(n, config, *args, extra_config=None, env_extra=None):
            got, run.stdout = launch_sharded(d, n, config, *args, extra_config=extra_config, env_extra=env_extra)
            return got

        for n in (2, 3, 4):
            for model, accum, clip in (("mlp", 1, 0), ("gpt", 2, 0.05)) + ((("llama", 1, 0.05),) if n == 3 else ()):
                ddp = run(n, "ddp", model, 50, accum, clip)
                start = run(n, "ddp", model, 0, accum, clip)
                if ddp is None or start is None:
                    return
                moved = max_abs_diff(ddp, start)
                expect(moved > 1e-2, f"{model}: training changed the parameters", f"moved {moved}")
                worst = 0.0
                for config in SHARDED_CONFIGS:
                    got = run(n, config, model, 50, accum, clip)
                    if got is not None:
                        diff = max_abs_diff(ddp, got)
                        worst = max(worst, diff)
                        expect(diff <= 1e-6, f"{config} equals DDP: {model} on {n} processes, accumulation {accum}, "
                                             f"clip {clip}", f"max abs diff {diff}")
                print(f"{n} processes, {model}, accumulation {accum}, clip {clip}: every strategy vs DDP after 50 "
                      f"steps: max |diff| = {worst:.3g} (parameters moved by up to {moved:.3g})")
        # FSDP's activation_checkpointing: the blocks keep no activations and are recomputed in backward (under
        # FULL_SHARD after gathering their parameters again), and train exactly as without it.
        ac = "  fsdp_activation_checkpointing: true\n"
        no_shard = "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n  fsdp_auto_wrap_policy: {wrap}\n"
        for n, model in ((2, "gpt"), (3, "llama")):
            ddp = run(n, "ddp", model, 50, 2, 0.05)
            # (Accelerate 1.15's fsdp_activation_checkpointing_offload with FSDP2: the kept inputs wait in CPU memory,
            # where they already are on a CPU; accepted end to end and training the same.)
            for name, config in (("FULL_SHARD", SHARDED_CONFIGS["full_shard"] + ac),
                                 ("SHARD_GRAD_OP", SHARDED_CONFIGS["shard_grad_op"] + ac),
                                 ("SHARD_GRAD_OP with offload", SHARDED_CONFIGS["shard_grad_op"] + ac +
                                  "  fsdp_activation_checkpointing_offload: true\n"),
                                 ("NO_SHARD", no_shard + ac)):
                got = run(n, config, model, 50, 2, 0.05)
                if ddp is not None and got is not None:
                    diff = max_abs_diff(ddp, got)
                    print(f"activation checkpointing, {name}, {model} on {n} processes: vs DDP after 50 steps: "
                          f"max |diff| = {diff:.3g}")
                    expect(diff <= 1e-6, f"activation checkpointing under {name} equals DDP: {model} on {n} processes",
                           f"max abs diff {diff}")
        path = os.path.join(d, "ac-mlp.yaml")
        with open(path, "w") as f:
            f.write(SHARDED_CONFIGS["full_shard"].replace("{wrap}", WRAP["mlp"]) + ac + "use_cpu: true\n")
        p = subprocess.run([ACC, "launch", "--config_file", path, "--num_processes", "2", "--main_process_port", "0",
                            WORKER, "mlp", "1", "1", "0", os.path.join(d, "ac-mlp")], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, ACC_CONFIG_FILE="none"))
        expect(p.returncode != 0 and "'fsdp_plugin.activation_checkpointing' = true: this model has no blocks" in p.stdout + p.stderr,
               "activation checkpointing of a model without blocks (the MLP) is refused, naming the key", p.stdout + p.stderr)
        # FSDP's cpu_ram_efficient_loading (fsdp_cpu_ram_efficient_loading, with sync_module_states): as transformers
        # does it, acc_model_from_pretrained on a process other than its machine's first checks the checkpoint's
        # header and reads no weights (the file is never mapped); prepare broadcasts rank 0's. Training from there
        # is training from the weights read everywhere, bit for bit.
        start = run(1, "ddp", "llama", 0, 1, 0)
        pretrained = os.path.join(d, "1-ddp-llama-0-1-0")
        with open(os.path.join(pretrained, "config.json"), "w") as f:
            f.write(LLAMA_CONFIG)
        fsdp = SHARDED_CONFIGS["full_shard"] + "  fsdp_sync_module_states: true\n  fsdp_cpu_ram_efficient_loading: "
        loaded = {}
        for efficient in ("false", "true"):
            loaded[efficient] = run(2, fsdp + efficient + "\n", "llama", 20, 1, 0, env_extra={"MP_PRETRAINED": pretrained})
            mapped = dict(re.findall(r"WEIGHTS local_rank=(\d) mapped=(\d)", run.stdout))
            want = {"0": "1", "1": "0" if efficient == "true" else "1"}
            expect(mapped == want, f"cpu_ram_efficient_loading {efficient}: the weights file is read by local ranks "
                   f"{[r for r, m in sorted(want.items()) if m == '1']}", f"{mapped}\n{run.stdout}")
        if start is not None and None not in loaded.values():
            expect(max_abs_diff(loaded["true"], loaded["false"]) == 0 and max_abs_diff(loaded["true"], start) > 1e-3,
                   "cpu_ram_efficient_loading trains as loading everywhere", f"{max_abs_diff(loaded['true'], loaded['false'])}")
        # A TorchScript module (tests/mp/mp_cxx --write-script): sharded whole, one unit.
        script = os.path.join(d, "mlp.pt")
        subprocess.run([os.path.join(os.path.dirname(WORKER), "mp_cxx"), "--write-script", script], check=True)
        WRAP[script] = "NO_WRAP"
        ddp = run(3, "ddp", script, 50, 2, 0.05)
        for config in SHARDED_CONFIGS:
            got = run(3, config, script, 50, 2, 0.05)
            if ddp is not None and got is not None:
                expect(max_abs_diff(ddp, got) <= 1e-6, f"TorchScript: {config} equals DDP on 3 processes",
                       str(max_abs_diff(ddp, got)))
        # Checkpoints: save_state writes whole-parameter model and optimizer state whatever the strategy, so a
        # checkpoint of 2 ZeRO-3 processes loads on 3 FSDP ones and back on 2 DDP ones, file for file; and resuming
        # a ZeRO-3 run is exact.
        def ckpt(n, config, steps, load, save):
            return run(n, config, "gpt", steps, 1, 0, load, save)
        s2, s3, s4 = (os.path.join(d, x) for x in ("S2", "S3", "S4"))
        straight = run(2, "zero3", "gpt", 20, 1, 0)
        ckpt(2, "zero3", 10, "-", s2)
        ckpt(3, "full_shard", 0, s2, s3)
        ckpt(2, "ddp", 0, s3, s4)
        for f in ("model.safetensors", "optimizer.safetensors", "optimizer.json"):
            same = all(os.path.exists(os.path.join(x, f)) for x in (s2, s3, s4)) and \
                open(os.path.join(s2, f), "rb").read() == open(os.path.join(s3, f), "rb").read() == \
                open(os.path.join(s4, f), "rb").read()
            expect(same, f"{f}: saved by 2 ZeRO-3 processes, loaded and saved again by 3 FSDP and by 2 DDP ones: equal")
        # SHARDED_STATE_DICT: each of 3 FSDP processes writes its slices (nothing gathered); 2 DDP processes load
        # them and save whole tensors equal to the first checkpoint's, file for file.
        s7, s8 = os.path.join(d, "S7"), os.path.join(d, "S8")
        ckpt(3, SHARDED_CONFIGS["full_shard"] + "  fsdp_state_dict_type: SHARDED_STATE_DICT\n", 0, s2, s7)
        names = sorted(os.listdir(s7)) if os.path.isdir(s7) else []
        expect("model.safetensors" not in names and
               [n for n in names if n.startswith("model_slices_0.rank")] ==
               [f"model_slices_0.rank{r}.{e}" for r in range(3) for e in ("json", "safetensors")],
               "SHARDED_STATE_DICT: one model slice file per process, no whole model", str(names))
        ckpt(2, "ddp", 0, s7, s8)
        for f in ("model.safetensors", "optimizer.safetensors", "optimizer.json"):
            same = all(os.path.exists(os.path.join(x, f)) for x in (s2, s8)) and \
                open(os.path.join(s2, f), "rb").read() == open(os.path.join(s8, f), "rb").read()
            expect(same, f"{f}: through 3 processes' slices and back to whole tensors on 2: equal")
        # Hybrid sharding's replicas write the same slices (FSDP2 HSDP: 2 replicas x 2 shards), bit for bit, which is
        # what loading requires of slices that overlap: 10 steps, then 2 DDP processes load them.
        hsdp_sharded = ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: {wrap}\n"
                        "  fsdp_state_dict_type: SHARDED_STATE_DICT\nparallelism_config:\n"
                        "  parallelism_config_dp_replicate_size: 2\n  parallelism_config_dp_shard_size: 2\n")
        s9, s10 = os.path.join(d, "S9"), os.path.join(d, "S10")
        ckpt(4, hsdp_sharded, 10, "-", s9)
        ckpt(2, "ddp", 0, s9, s10)
        expect(os.path.exists(os.path.join(s10, "model.safetensors")),
               "HSDP's SHARDED_STATE_DICT checkpoint (replicas' slices overlap, equal) loads on 2 DDP processes")
        resumed = ckpt(2, "zero3", 10, s2, os.path.join(d, "S5"))
        if straight is not None and resumed is not None:
            expect(max_abs_diff(straight, resumed) == 0, "ZeRO-3: 10 steps, save_state, load_state, 10 steps equal 20 steps",
                   str(max_abs_diff(straight, resumed)))
        # Mixed precision: with mixed_precision bf16, Accelerate gives FSDP a MixedPrecision(param_dtype=bf16,
        # reduce_dtype=bf16) policy (and DeepSpeed its bf16 mode): parameters gathered and computed in bf16,
        # gradients reduce-scattered in bf16, fp32 masters stepped and saved (read_safetensors requires F32). It
        # trains as DDP under bf16 autocast does, within bf16's precision.
        bf16 = "mixed_precision: bf16\n"
        want = run(2, bf16 + "distributed_type: MULTI_CPU\n", "gpt", 50, 1, 0)
        fp32 = run(2, "ddp", "gpt", 50, 1, 0)
        for name in ("full_shard", "zero2"):
            got = run(2, bf16 + SHARDED_CONFIGS[name], "gpt", 50, 1, 0)
            # FullyShardedDataParallelPlugin(mixed_precision_policy=...) in code: the explicit config here.
            explicit = run(2, SHARDED_CONFIGS["full_shard"], "gpt", 50, 1, 0, extra_config='"fsdp_plugin": '
                           '{"mixed_precision_policy": {"param_dtype": "bf16", "reduce_dtype": "fp32"}}') \
                if name == "full_shard" else None
            for label, result in ((name, got), ("an explicit policy", explicit)):
                if result is not None and want is not None and fp32 is not None:
                    diff, off_fp32 = max_abs_diff(want, result), max_abs_diff(fp32, result)
                    print(f"bf16 {label} vs DDP under bf16 autocast after 50 steps: max |diff| = {diff:.3g} "
                          f"({off_fp32:.3g} from fp32 DDP)")
                    expect(diff <= 2e-2, f"bf16 {label}: fp32 masters trained as DDP's within bf16 precision",
                           str(diff))
                    expect(off_fp32 > 1e-4, f"bf16 {label}: computed in bf16 (not as fp32 training)", str(off_fp32))
        # fp16 with a scale that overflows now and then: each process unscales only its shards, so whether to skip
        # the step must be agreed, or the processes' loss scalers part (the worker checks they are equal).
        with open(os.path.join(d, "fp16.yaml"), "w") as f:
            f.write(SHARDED_CONFIGS["zero2"] + "mixed_precision: fp16\nuse_cpu: true\n")
        p = subprocess.run([ACC, "launch", "--config_file", os.path.join(d, "fp16.yaml"), "--num_processes", "3",
                            "--main_process_port", "0", WORKER, "gpt", "30", "1", "0", os.path.join(d, "fp16")],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, ACC_CONFIG_FILE="none",
                                    MP_EXTRA_CONFIG='"grad_scaler_kwargs": {"init_scale": 1e12, "growth_interval": 3}'))
        expect(p.returncode == 0 and "SCALE" in p.stdout, "fp16 under ZeRO-2: every process skips the same steps",
               p.stdout + p.stderr)
        # DDP communication hooks (ddp_kwargs.comm_hook): fp16 / bf16 compression converges as uncompressed DDP
        # does (the traffic halves: test_ddp's Ddp.CompressionHooksHalveTheTraffic).
        losses, weights = {}, {}
        hooks = {"no": '"comm_hook": "no"', "fp16": '"comm_hook": "fp16"', "bf16": '"comm_hook": "bf16"',
                 # PowerSGD (rank 1: these layers are 10 wide) from step 10, with error feedback
                 "power_sgd": '"comm_hook": "power_sgd", "comm_state_option": {"matrix_approximation_rank": 1, '
                              '"start_powerSGD_iter": 10}',
                 # the whole bucket as one square matrix (rank 4), and PowerSGD run in fp16 (comm_wrapper)
                 "batched_power_sgd": '"comm_hook": "batched_power_sgd", "comm_state_option": '
                                      '{"matrix_approximation_rank": 4, "start_powerSGD_iter": 10}',
                 "power_sgd+fp16": '"comm_hook": "power_sgd", "comm_wrapper": "fp16", "comm_state_option": '
                                   '{"matrix_approximation_rank": 1, "start_powerSGD_iter": 10}'}
        for hook, kwargs in hooks.items():
            out = os.path.join(d, "hook-" + hook)
            p = subprocess.run([ACC, "launch", "--cpu", "--num_processes", "2", "--main_process_port", "0", WORKER,
                                "gpt", "50", "1", "0", out], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, ACC_CONFIG_FILE="none", MP_EXTRA_CONFIG=f'"ddp_kwargs": {{{kwargs}}}'))
            expect(p.returncode == 0, f"DDP with comm_hook {hook}", p.stdout + p.stderr)
            if p.returncode != 0:
                return
            losses[hook] = float(re.search(r"^LOSS (\S+)$", p.stdout, re.M).group(1))
            weights[hook] = read_safetensors(os.path.join(out, "model.safetensors"))
        # Stated tolerances: fp16/bf16 compression: the final loss within 1% and the parameters within 1e-2 of
        # uncompressed DDP's; PowerSGD (a rank-1 approximation, a different optimisation path): the loss within 5%.
        for hook, loss_tol, param_tol in (("fp16", 0.01, 1e-2), ("bf16", 0.01, 1e-2), ("power_sgd", 0.05, None),
                                          ("batched_power_sgd", 0.05, None), ("power_sgd+fp16", 0.05, None)):
            diff = max_abs_diff(weights[hook], weights["no"])
            print(f"comm_hook {hook}: loss after 50 steps {losses[hook]:.4f} vs {losses['no']:.4f} uncompressed; "
                  f"parameters within {diff:.3g}")
            expect(abs(losses[hook] - losses["no"]) <= loss_tol * losses["no"], f"comm_hook {hook}: the loss "
                   "converges as uncompressed DDP's", f"{losses[hook]} vs {losses['no']}")
            expect(diff > 0 and (param_tol is None or diff <= param_tol),
                   f"comm_hook {hook}: the parameters differ from DDP's (compression happened), within the tolerance",
                   str(diff))
        # DeepSpeed's gradient_clipping clips inside every step, as clipping in the loop does.
        ds_clip = ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  gradient_clipping: 0.05\n")
        got, want = run(2, ds_clip, "gpt", 30, 1, 0), run(2, "ddp", "gpt", 30, 1, 0.05)
        if got is not None and want is not None:
            expect(max_abs_diff(got, want) <= 1e-6, "deepspeed gradient_clipping equals clipping in the loop",
                   str(max_abs_diff(got, want)))
        # The same through a DeepSpeed JSON config file (deepspeed_config_file), as Accelerate's templates write it.
        ds_json = os.path.join(d, "ds_zero2.json")
        with open(ds_json, "w") as f:
            f.write('{"zero_optimization": {"stage": 2, "overlap_comm": true, "contiguous_gradients": true,'
                    ' "reduce_bucket_size": "auto"}, "gradient_clipping": 0.05, "gradient_accumulation_steps": "auto",'
                    ' "train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}')
        got = run(2, f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {ds_json}\n", "gpt", 30, 1, 0)
        if got is not None and want is not None:
            expect(max_abs_diff(got, want) <= 1e-6, "a DeepSpeed config file (ZeRO-2, gradient_clipping) equals DDP "
                   "clipping in the loop", str(max_abs_diff(got, want)))
        # An optimizer that stepped before prepare: refused on every process before anything changed.
        path = os.path.join(d, "zero2-refused.yaml")
        with open(path, "w") as f:
            f.write(SHARDED_CONFIGS["zero2"] + "use_cpu: true\n")
        p = subprocess.run([ACC, "launch", "--config_file", path, "--num_processes", "2", "--main_process_port", "0",
                            WORKER, "gpt", "1", "1", "0", os.path.join(d, "refused")], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, ACC_CONFIG_FILE="none", MP_STEP_BEFORE_PREPARE="1"))
        expect(p.returncode == 0 and "2 passed, 0 failed" in p.stdout, "a stepped optimizer is refused by prepare, "
               "which leaves the model unprepared", p.stdout + p.stderr)
        # HYBRID_SHARD and HYBRID_SHARD_ZERO2: two machines of 2 processes each shard inside a machine and replicate
        # across; they train as DDP on the 4 ranks does. The machines are two launchers on loopback, then two network
        # namespaces joined by a veth pair (where namespaces can be made: root with iproute2), each binding its own
        # address for Gloo as a cluster's machines do.
        import socket
        want = run(4, "ddp", "gpt", 30, 2, 0.05)

        def hybrid(strategy, ip, prefixes, envs, label):
            path = os.path.join(d, strategy + ".yaml")
            with open(path, "w") as f:
                f.write(f"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: {strategy}\n"
                        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
                        "  fsdp_transformer_layer_cls_to_wrap: GPT2Block\nuse_cpu: true\n")
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            out = os.path.join(d, f"hybrid-{strategy}-{label}")
            procs = [subprocess.Popen([*prefixes[m], ACC, "launch", "--config_file", path, "--num_processes", "4",
                                       "--num_machines", "2", "--machine_rank", str(m), "--main_process_ip", ip,
                                       "--main_process_port", str(port), WORKER, "gpt", "30", "2", "0.05", out],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=dict(os.environ, ACC_CONFIG_FILE="none", **envs[m])) for m in (1, 0)]
            outputs = [p.communicate(timeout=300)[0] for p in procs]
            ok = all(p.returncode == 0 for p in procs)
            expect(ok, f"{strategy} on 2 machines x 2 processes ({label})", "\n".join(outputs))
            if ok and want is not None:
                diff = max_abs_diff(want, read_safetensors(os.path.join(out, "model.safetensors")))
                print(f"{strategy}, 2 machines ({label}) x 2 processes vs DDP on 4: max |diff| = {diff:.3g}")
                expect(diff <= 1e-6, f"{strategy} ({label}) equals DDP", str(diff))

        for strategy in ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2"):
            hybrid(strategy, "127.0.0.1", [(), ()], [{}, {}], "loopback")
        # Accelerate's FSDP2 HSDP: parallelism_config's dp_replicate_size 2 x dp_shard_size 2 on one machine's 4 processes
        # (groups of 2 consecutive ranks shard, the 2 groups replicate), with and without resharding after forward.
        for reshard in ("true", "false"):
            hsdp = ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: " + reshard +
                    "\n  fsdp_auto_wrap_policy: {wrap}\nparallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
                    "  parallelism_config_dp_shard_size: 2\n")
            got = run(4, hsdp, "gpt", 30, 2, 0.05)
            if want is not None and got is not None:
                diff = max_abs_diff(want, got)
                print(f"FSDP2 HSDP (parallelism_config 2 x 2, reshard_after_forward {reshard}) vs DDP on 4: "
                      f"max |diff| = {diff:.3g}")
                expect(diff <= 1e-6, f"FSDP2 HSDP (reshard_after_forward {reshard}) equals DDP", str(diff))
        with two_machines() as m:
            if m is not None:
                for strategy in ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2"):
                    hybrid(strategy, m.addrs[0], m.prefix, [{"GLOO_SOCKET_IFNAME": v} for v in m.veth],
                           "network namespaces")


# Fine-tuning (issue 25): per model, what mp_sharded freezes (MP_FREEZE: frozen and trainable parameters inside
# one wrapped block) and its optimizer (MP_OPTIMIZER: SGD with momentum, three parameter groups).
FINETUNE = {
    "gpt": (r"transformer\.h\.\d+\.attn\..*|transformer\.wpe\.weight",
            '{"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01, "param_groups": ['
            '{"params": ".*mlp\\\\..*", "lr": 0.1}, {"params": [".*ln_.*"], "lr": 0.02, "momentum": 0.5}]}'),
    "llama": (r"model\.layers\.\d+\.self_attn\.(q|k)_proj\.weight|model\.layers\.\d+\.input_layernorm\.weight|"
              r"model\.embed_tokens\.weight",
              '{"type": "sgd", "lr": 0.1, "momentum": 0.9, "param_groups": ['
              '{"params": ".*mlp\\\\..*", "lr": 0.2}, {"params": ".*norm.*", "weight_decay": 0.0, "lr": 0.05}]}'),
}


def case_finetune():
    """Frozen parameters and parameter groups under every strategy: DDP, ZeRO-1/2/3 (with offload) and FSDP1 /
    FSDP2 (FULL_SHARD, SHARD_GRAD_OP, prefetching, offload) on 2 and 3 processes, and FSDP2 HSDP (2 x 2), each with
    part of every block frozen and three optimizer groups, end with single-process training's parameters after 20
    SGD steps (one process, the same global batch) within 1e-6; frozen parameters never move. Checkpoints hold
    optimizer state for the trainable parameters only, resume exactly under ZeRO-3 and go through SHARDED_STATE_DICT
    slices to DDP."""
    with tempfile.TemporaryDirectory() as d:
        def run(n, config, model, steps, *rest, batch=4, lora=None):
            freeze, optimizer = FINETUNE[model]
            env = {"MP_FREEZE": freeze, "MP_OPTIMIZER": optimizer, "MP_BATCH": str(batch)}
            if lora:  # an adapter on every linear layer and nothing else frozen; the B factors faster
                env = {"MP_LORA": lora, "MP_BATCH": str(batch), "MP_OPTIMIZER": '{"type": "sgd", "lr": 0.02, "momentum": '
                       '0.9, "param_groups": [{"params": ".*lora_B.*", "lr": 0.05}]}'}
            # The seedable sampler: every pass's order is the same on any number of processes (without it, one
            # process draws each epoch's seed from the default generator, several processes from rank 0's sampler
            # generator, as in Accelerate, so epochs after the first differ).
            got, out = launch_sharded(d, n, config, model, steps, 1, 0.5, *rest, env_extra=env,
                                      extra_config='"dataloader_config": {"use_seedable_sampler": true}')
            return got

        for model, (freeze, _) in FINETUNE.items():
            start = run(1, "ddp", model, 0)
            if start is None:
                return
            frozen = {k for k in start if re.fullmatch(freeze, k)}
            for n in (2, 3):
                single = run(1, "ddp", model, 20, batch=4 * n)
                if single is None:
                    return
                expect(all(max_abs_diff({k: start[k]}, {k: single[k]}) == 0 for k in frozen) and
                       all(max_abs_diff({k: start[k]}, {k: single[k]}) > 1e-4 for k in start if k not in frozen),
                       f"{model}: the {len(frozen)} frozen parameters stay, every other one trains")
                worst = 0.0
                for config in ["ddp"] + list(SHARDED_CONFIGS):
                    got = run(n, config, model, 20)
                    if got is not None:
                        diff = max_abs_diff(single, got)
                        worst = max(worst, diff)
                        expect(diff <= 1e-6, f"{model}, {config} on {n} processes equals one process", f"max abs diff {diff}")
                print(f"{model}, {n} processes, {len(frozen)} of {len(start)} parameters frozen, 3 groups: every strategy "
                      f"vs one process after 20 SGD steps: max |diff| = {worst:.3g}")
        # LoRA (the frozen base sharded, the adapters trained in every block) under every strategy, on 2 processes.
        lora = '{"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "init_lora_weights": "gaussian"}'
        single = run(1, "ddp", "llama", 20, batch=8, lora=lora)
        if single is not None:
            worst = 0.0
            for config in ["ddp"] + list(SHARDED_CONFIGS):
                got = run(2, config, "llama", 20, lora=lora)
                if got is not None:
                    worst = max(worst, max_abs_diff(single, got))
                    expect(max_abs_diff(single, got) <= 1e-6, f"LoRA, {config} on 2 processes equals one process",
                           str(max_abs_diff(single, got)))
            print(f"llama with LoRA on every linear layer, 2 processes: every strategy vs one process after 20 SGD "
                  f"steps: max |diff| = {worst:.3g}")
        hsdp = ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: {wrap}\n"
                "parallelism_config:\n  parallelism_config_dp_replicate_size: 2\n  parallelism_config_dp_shard_size: 2\n")
        single, got = run(1, "ddp", "llama", 20, batch=16), run(4, hsdp, "llama", 20)
        if single is not None and got is not None:
            expect(max_abs_diff(single, got) <= 1e-6, "llama, FSDP2 HSDP 2 x 2 equals one process",
                   str(max_abs_diff(single, got)))
        # Checkpoints: optimizer state only for what trains; 10 + 10 steps under ZeRO-3 equal 20; SHARDED_STATE_DICT
        # slices (frozen parameters sharded too) load on 2 DDP processes and save the same whole files.
        a, b, c, e = (os.path.join(d, x) for x in ("A", "B", "C", "E"))
        straight = run(2, "zero3", "gpt", 20)
        run(2, "zero3", "gpt", 10, "-", a)
        resumed = run(2, "zero3", "gpt", 10, a, b)
        if straight is not None and resumed is not None:
            expect(max_abs_diff(straight, resumed) == 0, "ZeRO-3 with frozen parameters and groups: 10 steps, "
                   "save_state, load_state, 10 steps equal 20 steps", str(max_abs_diff(straight, resumed)))
        if os.path.exists(os.path.join(a, "optimizer.safetensors")):
            state = read_safetensors(os.path.join(a, "optimizer.safetensors"))
            params = read_safetensors(os.path.join(a, "model.safetensors"))
            trainable = [k for k in params if not re.fullmatch(FINETUNE["gpt"][0], k)]
            expect(len(trainable) == len(params) == 10, "the checkpoint's model file holds the 10 trainable parameters, "
                   "not the frozen ones", str(sorted(params)))
            expect(len(state) == len(trainable) and all(k.endswith(".momentum_buffer") for k in state),
                   "the checkpoint's optimizer state: one momentum buffer per trainable parameter, none for frozen ones",
                   f"{len(state)} tensors, {len(trainable)} trainable parameters: {sorted(state)[:4]}")
            with open(os.path.join(a, "optimizer.json")) as f:
                groups = json.load(f)["param_groups"]
            expect([g["num_params"] for g in groups] == [4, 5, 1] and [g["lr"] for g in groups] == [0.1, 0.02, 0.05],
                   "the checkpoint's optimizer.json: the three groups, in order", str(groups))
        run(3, SHARDED_CONFIGS["full_shard"] + "  fsdp_state_dict_type: SHARDED_STATE_DICT\n", "gpt", 0, a, c)
        run(2, "ddp", "gpt", 0, c, e)
        for f in ("model.safetensors", "optimizer.safetensors", "optimizer.json"):
            same = all(os.path.exists(os.path.join(x, f)) for x in (a, e)) and \
                open(os.path.join(a, f), "rb").read() == open(os.path.join(e, f), "rb").read()
            expect(same, f"{f}: with frozen parameters and groups, through 3 processes' slices and back on 2: equal")

if __name__ == "__main__":
    globals()[f"case_{sys.argv[3]}"]()
    finish()
