#!/usr/bin/env python3
"""Tests of `acc launch` with a torch-free worker (rank_probe).

usage: test_launch.py ACC RANK_PROBE DATA_DIR [test names...]
       test_launch.py --list

Every test runs in its own temporary HOME (so no user config file is read), bounds every wait, and checks with
the pids the workers wrote that no process is left behind.
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ACC = PROBE = DATA = None


def alive(pid):
    """True if the process exists and is not a zombie (orphans may wait for an init that never reaps them)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def validate(schema, value, path="$"):
    """Errors of `value` against the subset of JSON Schema `acc config schema` uses."""
    errs = []
    if "anyOf" in schema:
        if all(validate(alt, value, path) for alt in schema["anyOf"]):
            errs.append(f"{path}: matches no alternative")
        return errs
    types = schema.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        kinds = {"null": value is None, "boolean": isinstance(value, bool),
                 "integer": isinstance(value, int) and not isinstance(value, bool),
                 "number": isinstance(value, (int, float)) and not isinstance(value, bool),
                 "string": isinstance(value, str), "array": isinstance(value, list), "object": isinstance(value, dict)}
        if not any(kinds[t] for t in types):
            return [f"{path}: not {types}"]
    if "const" in schema and value != schema["const"]:
        errs.append(f"{path}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path}: {value!r} not in enum")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(f"{path}: below minimum")
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(f"{path}: above maximum")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(f"{path}: too few items")
        for i, v in enumerate(value):
            errs += validate(schema.get("items", {}), v, f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errs.append(f"{path}: missing {k}")
        for k, v in value.items():
            if k in props:
                errs += validate(props[k], v, f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}: unknown key {k}")
    return errs


def physical_cores():
    cores, phys = set(), "0"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("physical id"):
                phys = line.split(":", 1)[1].strip()
            elif line.startswith("core id"):
                cores.add((phys, line.split(":", 1)[1].strip()))
    return len(cores) or os.cpu_count()


def free_port():
    """A port free on every interface, with the next one free too (machine 0 gives the processes PORT + 1)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port >= 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


class LaunchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="acc-launch-test-")
        self.out = os.path.join(self.tmp, "out")
        os.mkdir(self.out)
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("ACCELERATE_", "FSDP_", "ACC_", "MASTER_", "OMP_", "XDG_", "HF_"))
                    and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
        self.env["HOME"] = self.home
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for pid in self.pids(kinds=("pid", "gpid")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------------------------------------
    def pids(self, kinds=("pid",)):
        out = []
        for name in sorted(os.listdir(self.out)):
            kind = name.split(".")[0]
            if kind in kinds and ".tmp." not in name:
                with open(os.path.join(self.out, name)) as f:
                    out.append(int(f.read().strip()))
        return out

    def envs(self):
        result = {}
        for name in os.listdir(self.out):
            if name.startswith("env.") and ".tmp." not in name:
                with open(os.path.join(self.out, name)) as f:
                    env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
                result[int(name.split(".")[1])] = env
        return result

    class Result:
        def __init__(self, returncode, stdout, stderr):
            self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def _files(self):
        # Output goes to files, not pipes: a leaked grandchild holding a pipe would block the reader and hide the
        # leak until it exits by itself.
        n = len(self.procs)
        return os.path.join(self.tmp, f"acc{n}.out"), os.path.join(self.tmp, f"acc{n}.err")

    def run_acc(self, *args, timeout=30, env=None):
        p = self.start_acc(*args, env=env)
        start = time.monotonic()
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
            self.fail(f"acc {' '.join(args)} ran more than {timeout} s")
        took = time.monotonic() - start
        return self.Result(rc, *self.output(p)), took

    def start_acc(self, *args, env=None):
        out, err = self._files()
        with open(out, "w") as o, open(err, "w") as e:
            p = subprocess.Popen([ACC, *args], env=env or self.env, cwd=self.tmp, stdout=o, stderr=e,
                                 stdin=subprocess.DEVNULL)
        p.files = (out, err)
        self.procs.append(p)
        return p

    def output(self, p):
        with open(p.files[0]) as o, open(p.files[1]) as e:
            return o.read(), e.read()

    def wait_for_files(self, kind, count, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.pids(kinds=(kind,))) >= count:
                return
            time.sleep(0.02)
        self.fail(f"only {len(self.pids(kinds=(kind,)))} of {count} {kind} files after {timeout} s")

    def assert_none_alive(self, kinds=("pid", "gpid"), within=3.0):
        pids = self.pids(kinds=kinds)
        self.assertTrue(pids, "the workers wrote no pid files")
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.02)
        self.assertEqual([p for p in pids if alive(p)], [], "processes left behind")

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    # --- environment contract ----------------------------------------------------------------------------------
    def test_env_contract_three_processes(self):
        self.env["MY_VAR"] = "kept"
        p, _ = self.run_acc("launch", "--num_processes", "3", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1, 2])
        ports = {e["MASTER_PORT"] for e in envs.values()}
        self.assertEqual(len(ports), 1)
        port = int(ports.pop())
        self.assertTrue(0 < port < 65536)
        if "is in use" not in p.stderr:
            self.assertEqual(port, 29500)
        for r, e in envs.items():
            self.assertEqual(e["RANK"], str(r))
            self.assertEqual(e["LOCAL_RANK"], str(r))
            self.assertEqual(e["WORLD_SIZE"], "3")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "3")
            self.assertEqual(e["GROUP_RANK"], "0")
            self.assertEqual(e["ROLE_RANK"], str(r))
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(e["OMP_NUM_THREADS"], "1")
            self.assertEqual(e["ACCELERATE_MIXED_PRECISION"], "no")
            self.assertEqual(e["ACCELERATE_USE_CPU"], "False")
            self.assertEqual(e["ACCELERATE_DYNAMO_BACKEND"], "NO")
            self.assertEqual(e["ACCELERATE_DYNAMO_MODE"], "default")
            self.assertEqual(e["MY_VAR"], "kept")
            self.assertNotIn("ACCELERATE_USE_FSDP", e)
        self.assertIn("OMP_NUM_THREADS=1", p.stderr)

    def test_omp_num_threads_is_kept_or_set(self):
        self.env["OMP_NUM_THREADS"] = "4"
        p, _ = self.run_acc("launch", "--num-processes", "2", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual({e["OMP_NUM_THREADS"] for e in self.envs().values()}, {"4"})
        self.assertNotIn("OMP_NUM_THREADS=1", p.stderr)
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        p, _ = self.run_acc("launch", "--num_processes=2", "--num_cpu_threads_per_process", "3", PROBE, "--out",
                            self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual({e["OMP_NUM_THREADS"] for e in self.envs().values()}, {"3"})

    def test_single_process_and_flags(self):
        p, _ = self.run_acc("launch", "--cpu", "--mixed_precision", "bf16", "--debug", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        e = self.envs()[0]
        self.assertEqual(e["WORLD_SIZE"], "1")
        self.assertEqual(e["ACCELERATE_USE_CPU"], "True")
        self.assertEqual(e["ACCELERATE_MIXED_PRECISION"], "bf16")
        self.assertEqual(e["ACCELERATE_DEBUG_MODE"], "true")
        self.assertEqual(e["KMP_BLOCKTIME"], "1")
        self.assertNotIn("CUDA_VISIBLE_DEVICES", e)
        # As accelerate launch with --cpu: OMP_NUM_THREADS = physical cores / processes, when that is more than 1.
        cores = physical_cores()
        self.assertEqual(e.get("OMP_NUM_THREADS"), str(cores) if cores > 1 else None)
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        p, _ = self.run_acc("launch", "--gpu_ids", "0", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        e = self.envs()[0]
        self.assertEqual(e["CUDA_VISIBLE_DEVICES"], "0")
        self.assertEqual(e["ACCELERATE_USE_CPU"], "False")

    def test_program_arguments_pass_through(self):
        # options after the program belong to the program, even ones acc also has
        script = self.write("args.sh", '#!/bin/sh\nprintf "%s|" "$@" > "$OUT_FILE.$RANK"\n')
        os.chmod(script, 0o755)
        self.env["OUT_FILE"] = os.path.join(self.out, "args")
        p, _ = self.run_acc("launch", "--num_processes", "2", script, "--num_processes", "7", "--", "x y")
        self.assertEqual(p.returncode, 0, p.stderr)
        for r in (0, 1):
            with open(os.path.join(self.out, f"args.{r}")) as f:
                self.assertEqual(f.read(), "--num_processes|7|--|x y|")

    def test_two_machines_on_loopback(self):
        # Two launchers on this host, machine ranks 1 and 0 (1 starts first and waits for 0).
        port = free_port()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port))
        m1 = self.start_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out)
        time.sleep(0.3)
        p, _ = self.run_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(m1.wait(timeout=30), 0, self.output(m1)[1])
        self.assertIn("machine rank 1", p.stderr)  # machine 0 says who joined
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1, 2, 3])  # files are named by RANK
        for r, e in envs.items():
            self.assertEqual(e["LOCAL_RANK"], str(r % 2))
            self.assertEqual(e["WORLD_SIZE"], "4")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "2")
            self.assertEqual(e["GROUP_RANK"], str(r // 2))
            self.assertEqual(e["GROUP_WORLD_SIZE"], "2")
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(e["MASTER_PORT"], str(port + 1))  # the launchers meet on PORT, the processes on PORT+1

    def test_machine_zero_port_held_by_another_program(self):
        # Something that is not an acc launcher holds machine 0's port at first (it answers and hangs up): machine 1
        # keeps trying (it used to give up after 0.02 s) and joins once machine 0's acc launch listens there.
        import socket
        import threading
        port = free_port()
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        answered = []

        def answer():
            squatter.settimeout(0.2)
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                try:
                    conn, _ = squatter.accept()
                except socket.timeout:
                    continue
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                conn.close()
                answered.append(1)
            squatter.close()

        t = threading.Thread(target=answer)
        t.start()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port), "--rdzv_conf", "join_timeout=30")
        m1 = self.start_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out)
        t.join()
        self.assertGreater(len(answered), 0)
        self.assertIsNone(m1.poll(), "machine 1 gave up while another program held the port")
        p, _ = self.run_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(m1.wait(timeout=30), 0, self.output(m1)[1])
        self.assertIn("not an acc launcher", self.output(m1)[1])

    def test_multi_machine_errors(self):
        for args, message in ((["--num_machines", "2", "--num_processes", "4"], "--main_process_ip"),
                              (["--num_machines", "2", "--num_processes", "3", "--main_process_ip", "h"],
                               "must be a multiple of 'num_machines'"),
                              (["--num_machines", "2", "--num_processes", "4", "--main_process_ip", "h",
                                "--main_process_port", "0"], "works on one machine only")):
            p, _ = self.run_acc("launch", *args, PROBE)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(message, p.stderr, args)

    # --- ports -------------------------------------------------------------------------------------------------
    def test_port_zero_gives_distinct_free_ports(self):
        # The first launch holds its port (rank 0 binds MASTER_PORT, proving it was free) while the second starts.
        first = self.start_acc("launch", "--num_processes", "2", "--main_process_port", "0", PROBE, "--out",
                               self.out, "--bind-master", "--sleep", "30")
        self.wait_for_files("bound", 1)
        out2 = os.path.join(self.tmp, "out2")
        os.mkdir(out2)
        p, _ = self.run_acc("launch", "--num_processes", "2", "--main-process-port", "0", PROBE, "--out", out2,
                            "--bind-master")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.out, "bound.0")) as f:
            port1 = int(f.read())
        with open(os.path.join(out2, "bound.0")) as f:
            port2 = int(f.read())
        self.assertNotEqual(port1, port2)
        self.assertNotIn(port1, (0, 29500))
        first.send_signal(signal.SIGTERM)
        self.assertEqual(first.wait(timeout=10), 128 + signal.SIGTERM)
        self.assert_none_alive(kinds=("pid",))

    def test_port_in_use_switches_to_a_free_port(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            busy = s.getsockname()[1]
            p, _ = self.run_acc("launch", "--num_processes", "2", "--main_process_port", str(busy), PROBE,
                                "--out", self.out, "--bind-master")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"port {busy} is in use", p.stderr)
        port = int(self.envs()[0]["MASTER_PORT"])
        self.assertNotEqual(port, busy)

    # --- failures ----------------------------------------------------------------------------------------------
    def test_rank_exit_status_stops_the_others(self):
        p, took = self.run_acc("launch", "--num_processes", "3", PROBE, "--out", self.out, "--fail-rank", "1",
                               "--code", "3", "--sleep", "60", "--grandchild")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertLess(took, 10)
        self.assertIn("failed rank : 1 (local_rank 1", p.stderr)
        self.assertIn("exited with status 3", p.stderr)
        self.assertIn("stopped     : rank 0, 2 (SIGTERM)", p.stderr)
        self.assertEqual(p.stderr.count("FAILED"), 1)
        self.assert_none_alive()

    def test_rank_killed_by_signal(self):
        p, took = self.run_acc("launch", "--num_processes", "3", PROBE, "--out", self.out, "--fail-rank", "2",
                               "--signal", str(int(signal.SIGSEGV)), "--sleep", "60")
        self.assertEqual(p.returncode, 128 + signal.SIGSEGV, p.stderr)
        self.assertLess(took, 10)
        self.assertIn("failed rank : 2", p.stderr)
        self.assertIn("killed by signal SIGSEGV", p.stderr)
        self.assert_none_alive()

    def test_workers_ignoring_sigterm_are_killed(self):
        p, took = self.run_acc("launch", "--num_processes", "3", "--term_timeout", "2", PROBE, "--out", self.out,
                               "--fail-rank", "0", "--code", "5", "--sleep", "60", "--ignore-term", "--grandchild")
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertGreaterEqual(took, 1.9)
        self.assertLess(took, 10)
        self.assertIn("sending SIGKILL", p.stderr)
        self.assertIn("killed      : rank 1, 2 (SIGKILL", p.stderr)
        self.assert_none_alive()

    def test_default_grace_is_bounded(self):
        p, took = self.run_acc("launch", "--num_processes", "2", PROBE, "--out", self.out, "--fail-rank", "1",
                               "--sleep", "60", "--ignore-term")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertLess(took, 10)
        self.assert_none_alive()

    def test_all_succeed(self):
        p, took = self.run_acc("launch", "--num_processes", "4", PROBE, "--out", self.out, "--sleep", "0.3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertLess(took, 5)
        self.assertEqual(len(self.pids()), 4)
        self.assertNotIn("FAILED", p.stderr)
        self.assert_none_alive()

    # --- signals to acc ---------------------------------------------------------------------------------------
    def interrupt(self, sig, *probe_args, term_timeout="5"):
        acc = self.start_acc("launch", "--num_processes", "3", "--term_timeout", term_timeout, PROBE, "--out",
                             self.out, "--sleep", "60", "--grandchild", *probe_args)
        self.wait_for_files("pid", 3)
        start = time.monotonic()
        acc.send_signal(sig)
        rc = acc.wait(timeout=15)
        took = time.monotonic() - start
        return rc, took, self.output(acc)[1]

    def test_sigint_leaves_no_process(self):
        rc, took, err = self.interrupt(signal.SIGINT)
        self.assertEqual(rc, 128 + signal.SIGINT, err)
        self.assertLess(took, 5)
        self.assertIn("received SIGINT", err)
        self.assert_none_alive()

    def test_sigterm_with_stubborn_workers(self):
        rc, took, err = self.interrupt(signal.SIGTERM, "--ignore-term", term_timeout="1")
        self.assertEqual(rc, 128 + signal.SIGTERM, err)
        self.assertLess(took, 8)
        self.assertIn("sending SIGKILL", err)
        self.assert_none_alive()

    def test_second_sigint_escalates(self):
        acc = self.start_acc("launch", "--num_processes", "2", "--term_timeout", "30", PROBE, "--out", self.out,
                             "--sleep", "60", "--ignore-term")
        self.wait_for_files("pid", 2)
        start = time.monotonic()
        acc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        acc.send_signal(signal.SIGINT)
        rc = acc.wait(timeout=15)
        self.assertEqual(rc, 128 + signal.SIGINT)
        self.assertLess(time.monotonic() - start, 5)
        self.assert_none_alive()

    def test_inherited_sigchld_ignore_is_undone(self):
        # With SIGCHLD ignored the kernel would reap the workers itself; acc must still see rank 1's status.
        out, err = self._files()
        with open(out, "w") as o, open(err, "w") as e:
            p = subprocess.Popen([ACC, "launch", "--num_processes", "2", PROBE, "--out", self.out, "--fail-rank", "1",
                                  "--code", "4", "--sleep", "60"], env=self.env, cwd=self.tmp, stdout=o, stderr=e,
                                 preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN))
        p.files = (out, err)
        self.procs.append(p)
        self.assertEqual(p.wait(timeout=20), 4, self.output(p)[1])
        self.assertIn("exited with status 4", self.output(p)[1])
        self.assert_none_alive(kinds=("pid",))

    def test_sigkill_to_acc_kills_the_workers(self):
        acc = self.start_acc("launch", "--num_processes", "3", PROBE, "--out", self.out, "--sleep", "60",
                             "--ignore-term")
        self.wait_for_files("pid", 3)
        acc.kill()
        acc.wait(timeout=10)
        self.assert_none_alive(kinds=("pid",), within=5)  # PR_SET_PDEATHSIG

    # --- configuration -----------------------------------------------------------------------------------------
    def test_flags_beat_the_config_file(self):
        cfg = self.write("cfg.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: bf16\n"
                                     "debug: true\nmain_process_port: 0\n")
        p, _ = self.run_acc("launch", "--config_file", cfg, "--mixed_precision", "fp16", "--num_processes", "3",
                            PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1, 2])
        self.assertEqual({e["ACCELERATE_MIXED_PRECISION"] for e in envs.values()}, {"fp16"})
        self.assertEqual({e["ACCELERATE_DEBUG_MODE"] for e in envs.values()}, {"true"})  # from the file
        self.assertNotEqual(envs[0]["MASTER_PORT"], "29500")

    def test_accelerate_paradigm_flags(self):
        p, _ = self.run_acc("launch", "--use_fsdp", "--fsdp-version", "2", "--fsdp_reshard_after_forward", "false",
                            "--fsdp_transformer_layer_cls_to_wrap", "Block", "--mixed_precision", "fp8",
                            "--fp8_backend", "te", "--fp8_override_linear_precision", "true,false,true",
                            "--num_processes", "2", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        e = self.envs()[0]
        self.assertEqual(e["ACCELERATE_USE_FSDP"], "true")
        self.assertEqual(e["FSDP_VERSION"], "2")
        self.assertEqual(e["FSDP_RESHARD_AFTER_FORWARD"], "false")
        self.assertEqual(e["FSDP_TRANSFORMER_CLS_TO_WRAP"], "Block")
        self.assertEqual(e["ACCELERATE_FP8_BACKEND"], "TE")
        self.assertEqual(e["ACCELERATE_FP8_OVERRIDE_FPROP"], "True")
        self.assertEqual(e["ACCELERATE_FP8_OVERRIDE_DGRAD"], "False")
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        p, _ = self.run_acc("launch", "--use_deepspeed", "--zero_stage", "3", "--gradient_accumulation_steps", "2",
                            PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        e = self.envs()[0]
        self.assertEqual(e["ACCELERATE_USE_DEEPSPEED"], "true")
        self.assertEqual(e["ACCELERATE_DEEPSPEED_ZERO_STAGE"], "3")
        self.assertEqual(e["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"], "2")
        self.assertNotIn("ACCELERATE_USE_FSDP", e)
        p, _ = self.run_acc("launch", "--use_fsdp", "--cpu", PROBE)
        self.assertEqual(p.returncode, 2)
        self.assertIn("only one of --cpu, --multi_gpu", p.stderr)
        p, _ = self.run_acc("launch", "--use_deepspeed", "--zero_stage", "4", PROBE)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--zero_stage: 'deepspeed_config.zero_stage' must be an integer between 0 and 3", p.stderr)

    def test_unknown_config_key_starts_nothing(self):
        cfg = self.write("cfg.yaml", "distributed_type: NO\nnum_processes: 2\nmixed_precison: fp16\n")
        p, _ = self.run_acc("launch", "--config_file", cfg, PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"{cfg}:3: unknown key 'mixed_precison' (did you mean 'mixed_precision'?); accepted: ", p.stderr)
        self.assertIn("num_processes", p.stderr)
        self.assertEqual(os.listdir(self.out), [])

    def test_bad_values_start_nothing(self):
        cases = [
            (["--mixed_precision", "fp32"], "'mixed_precision' must be one of \"no\", \"fp16\", \"bf16\", \"fp8\""),
            (["--num_processes", "0"], "--num_processes: 'num_processes' must be an integer between 1 and 65536; got \"0\""),
            # were: SIGFPE (cut to int), exit 0 with nothing run, 2 processes, bad_alloc (issue 12)
            (["--cpu", "--num_processes", "4294967296"], "must be an integer between 1 and 65536; got \"4294967296\""),
            (["--num_processes", "4294967296"], "must be an integer between 1 and 65536; got \"4294967296\""),
            (["--num_processes", "4294967298"], "must be an integer between 1 and 65536; got \"4294967298\""),
            (["--cpu", "--num_processes", "2147483647"], "must be an integer between 1 and 65536"),
            (["--cpu", "--num_processes", "4096"], "puts 4096 processes on each machine, more than the limit of 1024"),
            (["--num_processes", "two"], "--num_processes: 'num_processes' must be an integer"),
            (["--main_process_port", "70000"], "'main_process_port' must be an integer between 0 and 65535"),
            (["--num_procesess", "2"], "unknown option '--num_procesess' (did you mean '--num_processes'?)"),
            (["--num_processes"], "needs a value"),
            ([], "missing the PROGRAM"),
            (["--term_timeout", "-1"], "--term_timeout must be a number of seconds in (0, 3600]; got '-1'"),
            # CLI11's validators, with the text's form checked first (no NaN, no octal or hex integers)
            (["--term-timeout", "nan"], "--term-timeout must be a number of seconds in (0, 3600]; got 'nan'"),
            (["--max_restarts", "1.5"], "--max_restarts must be an integer in [0, 1000000]; got '1.5'"),
            (["--max_restarts", "0x10"], "--max_restarts must be an integer in [0, 1000000]; got '0x10'"),
            (["--num_cpu_threads_per_process", "0"], "must be an integer in [1, 100000]; got '0'"),
            (["--rdzv_conf", "join_timeout=0"], "--rdzv_conf: join_timeout must be a number of seconds > 0; got '0'"),
        ]
        for args, message in cases:
            prog = [PROBE, "--out", self.out] if args != [] and args != ["--num_processes"] else []
            p, _ = self.run_acc("launch", *args, *prog)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(message, p.stderr, args)
            self.assertEqual(os.listdir(self.out), [], args)
        # acc test's own numbers, by the same validators.
        for args, message in [(["--steps", "0"], "--steps must be an integer in [1, 100000]; got '0'"),
                              (["--steps", "1.5"], "--steps must be an integer in [1, 100000]; got '1.5'"),
                              (["--timeout", "nan"], "--timeout must be a number of seconds in (0, 31536000]; got 'nan'")]:
            p, _ = self.run_acc("test", *args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(message, p.stderr, args)

    def test_yaml_default_config_read_unchanged(self):
        # Accelerate's own default location: $HF_HOME/accelerate/default_config.yaml
        hf = os.path.join(self.tmp, "hf")
        os.makedirs(os.path.join(hf, "accelerate"))
        shutil.copy(os.path.join(DATA, "default_config.yaml"), os.path.join(hf, "accelerate", "default_config.yaml"))
        self.env["HF_HOME"] = hf
        p, _ = self.run_acc("launch", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1])  # num_processes: 2 from the file
        self.assertEqual(envs[0]["ACCELERATE_MIXED_PRECISION"], "bf16")
        self.assertEqual(envs[0]["ACCELERATE_USE_CPU"], "False")
        self.assertNotIn("CUDA_VISIBLE_DEVICES", envs[0])  # gpu_ids: all
        # our own default location wins over Accelerate's
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        self.write("home/.cache/acc/default_config.yaml", "distributed_type: NO\nmixed_precision: fp16\n")
        p, _ = self.run_acc("launch", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(self.envs()), [0])
        self.assertEqual(self.envs()[0]["ACCELERATE_MIXED_PRECISION"], "fp16")
        # ACC_CONFIG_FILE=none: no file at all
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        self.env["ACC_CONFIG_FILE"] = "none"
        p, _ = self.run_acc("launch", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.envs()[0]["ACCELERATE_MIXED_PRECISION"], "no")
        # and ACC_CONFIG_FILE over both; a missing one is an error
        self.env["ACC_CONFIG_FILE"] = os.path.join(self.tmp, "missing.yaml")
        p, _ = self.run_acc("launch", PROBE)
        self.assertEqual(p.returncode, 2)
        self.assertIn("missing.yaml", p.stderr)

    def test_fsdp_config_exports(self):
        p, _ = self.run_acc("launch", "--config_file", os.path.join(DATA, "fsdp_config.yaml"), "--num_processes", "2",
                            PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        e = self.envs()[1]
        self.assertEqual(e["ACCELERATE_USE_FSDP"], "true")
        self.assertEqual(e["FSDP_SHARDING_STRATEGY"], "SHARD_GRAD_OP")
        self.assertEqual(e["ACCELERATE_MIXED_PRECISION"], "fp16")
        self.assertEqual(e["WORLD_SIZE"], "2")

    def test_sagemaker_is_refused(self):
        p, _ = self.run_acc("launch", "--config_file", os.path.join(DATA, "sagemaker_config.yaml"), PROBE,
                            "--out", self.out)
        self.assertEqual(p.returncode, 2)
        self.assertIn("AMAZON_SAGEMAKER", p.stderr)
        self.assertEqual(os.listdir(self.out), [])

    # --- the program -------------------------------------------------------------------------------------------
    def test_program_not_found(self):
        p, _ = self.run_acc("launch", "--num_processes", "2", "no-such-program-acc-test")
        self.assertEqual(p.returncode, 127)
        self.assertIn("cannot execute 'no-such-program-acc-test': not found in PATH", p.stderr)
        p, _ = self.run_acc("launch", "./missing/prog")
        self.assertEqual(p.returncode, 127)
        self.assertIn("No such file or directory", p.stderr)

    def test_program_not_executable(self):
        f = self.write("notexec.sh", "#!/bin/sh\n")
        p, _ = self.run_acc("launch", f)
        self.assertEqual(p.returncode, 126)
        self.assertIn("permission denied", p.stderr)
        p, _ = self.run_acc("launch", self.tmp)
        self.assertEqual(p.returncode, 126)
        self.assertIn("is a directory", p.stderr)

    def test_exec_failure_after_fork_is_reported(self):
        # executable bit set, but not a valid executable: execve fails in the child (ENOEXEC)
        f = self.write("bad.bin", "\x7fELF garbage")
        os.chmod(f, 0o755)
        p, took = self.run_acc("launch", "--num_processes", "3", f)
        self.assertEqual(p.returncode, 126, p.stderr)
        self.assertIn("cannot execute", p.stderr)
        self.assertIn("Exec format error", p.stderr)
        self.assertLess(took, 10)

    def test_python_program(self):
        script = self.write("t.py", "import os\nopen(os.environ['OUT'] + '.' + os.environ['RANK'], 'w').write('ok')\n")
        self.env["OUT"] = os.path.join(self.out, "py")
        p, _ = self.run_acc("launch", "--num_processes", "2", script)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(self.out)), ["py.0", "py.1"])

    # --- failure report, restarts, logs ----------------------------------------------------------------------------
    def test_failure_report_names_rank_status_and_last_lines(self):
        p, _ = self.run_acc("launch", "--num_processes", "2", PROBE, "--out", self.out, "--say", "hello",
                            "--fail-rank", "1", "--code", "3", "--sleep", "20")
        self.assertEqual(p.returncode, 3, p.stderr)
        report = p.stderr[p.stderr.index("=" * 20):]
        self.assertIn("FAILED", report)
        self.assertIn("failed rank : 1 (local_rank 1, pid ", report)
        self.assertIn("status      : exited with status 3", report)
        self.assertIn("stopped     : rank 0 (SIGTERM)", report)
        self.assertIn("last output : (rank 1, stdout and stderr, last 20 lines)", report)
        tail = [l for l in report.splitlines() if l.startswith("    | ")]
        self.assertEqual(len(tail), 20)  # only the last lines
        self.assertIn("    | hello final words", tail)  # a last line without its newline
        self.assertTrue(any(l in tail for l in ("    | hello err 30", "    | hello out 30")), tail)
        self.assertNotIn("    | hello err 5", tail)
        # the output itself went through unchanged
        self.assertIn("hello out 30", p.stdout)
        self.assertIn("hello err 1\n", p.stderr)
        self.assert_none_alive()

    def test_report_for_a_signal(self):
        p, _ = self.run_acc("launch", "--num_processes", "2", PROBE, "--out", self.out, "--fail-rank", "0",
                            "--signal", str(signal.SIGABRT), "--sleep", "20")
        self.assertEqual(p.returncode, 128 + signal.SIGABRT, p.stderr)
        self.assertIn("status      : killed by signal SIGABRT", p.stderr)
        self.assertIn("(rank 0 printed nothing)", p.stderr)

    def test_restarts_rerun_the_whole_group(self):
        # rank 1 fails in attempt 0 only: one restart, then success; every process of attempt 1 sees the count.
        p, _ = self.run_acc("launch", "--num_processes", "2", "--max_restarts", "3", PROBE, "--out", self.out,
                            "--fail-rank", "1", "--fail-attempts", "1", "--code", "5", "--sleep", "0.5")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("FAILED, restarting the group (restart 1 of 3)", p.stderr)
        self.assertEqual(p.stderr.count("restarting the group"), 1)
        for e in self.envs().values():  # the files of the last attempt
            self.assertEqual(e["TORCHELASTIC_RESTART_COUNT"], "1")
            self.assertEqual(e["TORCHELASTIC_MAX_RESTARTS"], "3")
        self.assert_none_alive()

    def test_restarts_run_out(self):
        p, took = self.run_acc("launch", "--num_processes", "2", "--max_restarts", "2", "--monitor_interval", "0.05",
                               PROBE, "--out", self.out, "--fail-rank", "0", "--code", "9", "--fail-after", "0.1")
        self.assertEqual(p.returncode, 9, p.stderr)
        self.assertEqual(p.stderr.count("restarting the group"), 2)
        self.assertIn("(restart 2 of 2)", p.stderr)
        self.assertIn("after       : ", p.stderr)
        self.assertIn("(attempt 3 of 3)", p.stderr)
        self.assertEqual({e["TORCHELASTIC_RESTART_COUNT"] for e in self.envs().values()}, {"2"})

    def test_no_restart_after_an_interrupt(self):
        p = self.start_acc("launch", "--num_processes", "2", "--max_restarts", "5", PROBE, "--out", self.out,
                           "--sleep", "30")
        self.wait_for_files("pid", 2)
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=15), 130)
        self.assertNotIn("restarting", self.output(p)[1])
        self.assert_none_alive()

    def test_tee_and_log_dir(self):
        logs = os.path.join(self.tmp, "logs")
        p, _ = self.run_acc("launch", "--num_processes", "2", "--tee", "0:3", "--log_dir", logs, PROBE,
                            "--say", "hi")
        self.assertEqual(p.returncode, 0, p.stderr)
        runs = os.listdir(logs)
        self.assertEqual(len(runs), 1)
        base = os.path.join(logs, runs[0], "attempt_0")
        self.assertEqual(sorted(os.listdir(base)), ["0"])  # only local rank 0 is teed
        with open(os.path.join(base, "0", "stdout.log")) as f:
            out = f.read()
        with open(os.path.join(base, "0", "stderr.log")) as f:
            err = f.read()
        self.assertTrue(out.startswith("hi out 1\n") and out.endswith("hi final words"), out[-50:])
        self.assertNotIn("err", out)
        self.assertTrue(err.startswith("hi err 1\n"), err[:50])
        # on the console, teed lines carry torchrun's prefix; the others do not
        self.assertIn("[default0]:hi out 30\n", p.stdout)
        self.assertIn("[default0]:hi err 30\n", p.stderr)
        self.assertIn("\nhi out 30\n", "\n" + p.stdout)  # rank 1, not teed
        self.assertIn("logs in " + os.path.join(logs, runs[0]), p.stderr)
        # --log_dir alone logs both streams of every rank; a restart gets its own attempt directory
        shutil.rmtree(logs)
        p, _ = self.run_acc("launch", "--num_processes", "2", "--log_dir", logs, "--max_restarts", "1", "--role",
                            "trainer", PROBE, "--out", self.out, "--say", "x", "--fail-rank", "1", "--fail-attempts", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        run = os.path.join(logs, os.listdir(logs)[0])
        self.assertEqual(sorted(os.listdir(run)), ["attempt_0", "attempt_1"])
        self.assertEqual(sorted(os.listdir(os.path.join(run, "attempt_1"))), ["0", "1"])
        self.assertIn("[trainer1]:x out 1", p.stdout)
        self.assertIn("logs        : " + os.path.join(run, "attempt_0", "1"), p.stderr)

    def test_bad_tee(self):
        for bad in ("4", "x", "0:9", ":1"):
            p, _ = self.run_acc("launch", "--tee", bad, PROBE)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--tee", p.stderr)

    # --- several machines ---------------------------------------------------------------------------------------
    def test_machine_that_never_arrives(self):
        port = free_port()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port), "--rdzv_conf", "join_timeout=1.5")
        p, took = self.run_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("rendezvous timed out after 1 s: 1 of 2 machines joined (missing machine rank 1)", p.stderr)
        self.assertLess(took, 10)
        self.assertEqual(self.pids(), [])  # nothing started
        p, took = self.run_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("could not reach machine 0 at 127.0.0.1:%d" % port, p.stderr)
        self.assertLess(took, 10)

    def test_machines_must_agree(self):
        port = free_port()
        base = ("launch", "--num_machines", "2", "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                "--rdzv_conf", "join_timeout=20")
        m0 = self.start_acc(*base, "--num_processes", "4", "--machine_rank", "0", PROBE, "--out", self.out)
        time.sleep(0.3)
        p, _ = self.run_acc(*base, "--num_processes", "6", "--machine_rank", "1", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("has num_processes 6, machine 0 has 4", p.stderr)
        self.assertEqual(m0.wait(timeout=20), 2)
        self.assertIn("has num_processes 6, machine 0 has 4", self.output(m0)[1])
        self.assertEqual(self.pids(), [])

    def test_failure_on_one_machine_stops_the_other(self):
        port = free_port()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port))
        m1 = self.start_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out, "--sleep", "60",
                            "--fail-rank", "3", "--code", "7", "--fail-after", "0.5")
        time.sleep(0.2)
        p, took = self.run_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out, "--sleep", "60")
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertLess(took, 20)
        self.assertIn("STOPPED", p.stderr)
        self.assertIn("because     : machine 1 (", p.stderr)
        self.assertIn("rank 3 exited with status 7", p.stderr)
        self.assertEqual(m1.wait(timeout=20), 7)
        self.assertIn("failed rank : 3 (local_rank 1", self.output(m1)[1])
        self.assert_none_alive()

    def test_a_machine_that_goes_silent_is_lost(self):
        # Machine 1's acc stops answering (SIGSTOP: as if its host froze or the network split without a reset):
        # machine 0 hears nothing for heartbeat_timeout, stops its processes and says why, instead of waiting.
        port = free_port()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port), "--rdzv_conf", "join_timeout=30,heartbeat_timeout=2")
        m1 = self.start_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out, "--sleep", "60")
        m0 = self.start_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out, "--sleep", "60")
        self.wait_for_files("pid", 4, timeout=20)
        m1.send_signal(signal.SIGSTOP)
        try:
            start = time.monotonic()
            self.assertEqual(m0.wait(timeout=30), 1)
            self.assertLess(time.monotonic() - start, 15)
            err = self.output(m0)[1]
            self.assertIn("lost contact with machine 1", err)
            self.assertIn("nothing heard from it for", err)
        finally:
            m1.send_signal(signal.SIGKILL)
            m1.send_signal(signal.SIGCONT)
            m1.wait(timeout=10)
        self.assert_none_alive()  # machine 1's processes die with their acc (PR_SET_PDEATHSIG)

    def test_restart_across_machines(self):
        port = free_port()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port), "--max_restarts", "1")
        m1 = self.start_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out, "--sleep", "1",
                            "--fail-rank", "2", "--fail-attempts", "1", "--fail-after", "0.2")
        time.sleep(0.2)
        p, _ = self.run_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out, "--sleep", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(m1.wait(timeout=30), 0, self.output(m1)[1])
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1, 2, 3])
        self.assertEqual({e["TORCHELASTIC_RESTART_COUNT"] for e in envs.values()}, {"1"})

    def test_sigint_on_machine_zero_stops_every_machine(self):
        port = free_port()
        common = ("launch", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", "127.0.0.1",
                  "--main_process_port", str(port))
        m1 = self.start_acc(*common, "--machine_rank", "1", PROBE, "--out", self.out, "--sleep", "60")
        m0 = self.start_acc(*common, "--machine_rank", "0", PROBE, "--out", self.out, "--sleep", "60")
        self.wait_for_files("pid", 4, timeout=20)
        m0.send_signal(signal.SIGINT)
        self.assertEqual(m0.wait(timeout=20), 130)
        self.assertNotEqual(m1.wait(timeout=20), 0)
        self.assert_none_alive()

    # --- job schedulers ------------------------------------------------------------------------------------------
    def test_srun_one_task_per_process(self):
        # As `srun -n 2 acc launch PROGRAM` would start us: each task runs exactly one process, its rank SLURM's.
        port = free_port()
        procs = []
        for r in range(2):
            env = dict(self.env, SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_LOCALID=str(r), SLURM_NODEID="0",
                       SLURM_NNODES="1", SLURM_TASKS_PER_NODE="2", SLURM_STEP_ID="0", SLURM_JOB_NODELIST="localhost")
            procs.append(self.start_acc("launch", "--main_process_port", str(port), PROBE, "--out", self.out, env=env))
        for p in procs:
            self.assertEqual(p.wait(timeout=30), 0, self.output(p)[1])
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1])
        for r, e in envs.items():
            self.assertEqual(e["WORLD_SIZE"], "2")
            self.assertEqual(e["LOCAL_RANK"], str(r))
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "2")
            self.assertEqual(e["MASTER_ADDR"], "localhost")
            self.assertEqual(e["MASTER_PORT"], str(port))
        # num_processes that contradicts the tasks is an error
        env = dict(self.env, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NNODES="1",
                   SLURM_STEP_ID="0")
        p, _ = self.run_acc("launch", "--num_processes", "3", PROBE, env=env)
        self.assertEqual(p.returncode, 2)
        self.assertIn("SLURM started 2 tasks", p.stderr)
        # a batch script (no job step) is not a task: the variables are ignored
        env.pop("SLURM_STEP_ID")
        p, _ = self.run_acc("launch", "--num_processes", "3", PROBE, "--out", self.out, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_srun_one_task_per_machine(self):
        # `srun --ntasks-per-node=1 acc launch --num_processes 4 PROGRAM` on two "nodes" of this host.
        port = free_port()
        procs = []
        for node in range(2):
            env = dict(self.env, SLURM_PROCID=str(node), SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NODEID=str(node),
                       SLURM_NNODES="2", SLURM_TASKS_PER_NODE="1(x2)", SLURM_STEP_ID="0",
                       SLURM_JOB_NODELIST="127.0.0.[1-2]")
            procs.append(self.start_acc("launch", "--num_processes", "4", "--main_process_port", str(port), PROBE,
                                        "--out", self.out, env=env))
        for p in procs:
            self.assertEqual(p.wait(timeout=30), 0, self.output(p)[1])
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1, 2, 3])
        for r, e in envs.items():
            self.assertEqual(e["GROUP_RANK"], str(r // 2))
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")  # the first node of the list

    def test_mpirun_one_rank_per_process(self):
        port = free_port()
        procs = []
        for r in range(3):
            env = dict(self.env, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="3",
                       OMPI_COMM_WORLD_LOCAL_RANK=str(r), OMPI_COMM_WORLD_LOCAL_SIZE="3")
            procs.append(self.start_acc("launch", "--main_process_port", str(port), PROBE, "--out", self.out, env=env))
        for p in procs:
            self.assertEqual(p.wait(timeout=30), 0, self.output(p)[1])
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1, 2])
        self.assertEqual({e["WORLD_SIZE"] for e in envs.values()}, {"3"})
        # --scheduler none ignores the variables
        env = dict(self.env, OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="3", OMPI_COMM_WORLD_LOCAL_RANK="1",
                   OMPI_COMM_WORLD_LOCAL_SIZE="3")
        shutil.rmtree(self.out)
        os.mkdir(self.out)
        p, _ = self.run_acc("launch", "--scheduler", "none", PROBE, "--out", self.out, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(self.envs()), [0])

    def test_mpirun_hostfile_runs_mpirun(self):
        # As accelerate launch does for MULTI_CPU with an mpirun hostfile: acc runs mpirun, which starts one
        # `acc launch --scheduler mpi` per process. A stand-in mpirun (Open MPI's spellings) plays the part here,
        # from a directory whose name has a space and a quote: `mpirun --version` runs without a shell (a shell
        # command line quoted with '...' broke on it, and the MPICH spellings were used).
        bindir = os.path.join(self.tmp, "it's a bin")
        os.mkdir(bindir)
        fake = os.path.join(bindir, "mpirun")
        with open(fake, "w") as f:
            f.write("""#!/usr/bin/env python3
import os, subprocess, sys
a = sys.argv[1:]
if a == ["--version"]:
    print("mpirun (Open MPI) 4.1.5"); sys.exit(0)
open(os.environ["FAKE_MPI_LOG"], "w").write("\\n".join(a))
opts = {}
while a and a[0].startswith("-"):
    opts[a[0]] = a[1]; a = a[2:]
n, per = int(opts["-n"]), int(opts["--npernode"])
procs = [subprocess.Popen(a, env=dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(n),
                                      OMPI_COMM_WORLD_LOCAL_RANK=str(r % per), OMPI_COMM_WORLD_LOCAL_SIZE=str(per)))
         for r in range(n)]
sys.exit(max(p.wait() for p in procs))
""")
        os.chmod(fake, 0o755)
        hosts = self.write("hostfile", "localhost slots=2\n")
        cfg = self.write("mpi.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n"
                                     "mpirun_config:\n  mpirun_hostfile: " + hosts + "\n")
        env = dict(self.env, PATH=bindir + ":" + self.env["PATH"], FAKE_MPI_LOG=os.path.join(self.tmp, "mpi.log"))
        p, _ = self.run_acc("launch", "--config_file", cfg, "--main_process_port", str(free_port()), PROBE, "--out",
                            self.out, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("warning", p.stderr)
        with open(env["FAKE_MPI_LOG"]) as f:
            argv = f.read().split("\n")
        self.assertEqual(argv[:8], ["--hostfile", hosts, "--npernode", "2", "-n", "2", "--bind-to", "socket"])
        self.assertEqual(argv[8:12], [ACC, "launch", "--scheduler", "mpi"])
        envs = self.envs()
        self.assertEqual(sorted(envs), [0, 1])
        self.assertEqual({e["WORLD_SIZE"] for e in envs.values()}, {"2"})
        # an mpirun whose --version fails: a warning naming it, then MPICH's spellings (as when it prints no version)
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'HYDRA build details:'; exit 5; fi\n"
                    "printf '%s\\n' \"$@\" > \"$FAKE_MPI_LOG\"\n")
        p, _ = self.run_acc("launch", "--config_file", cfg, PROBE, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"warning: '{fake}' exited with status 5", p.stderr)
        with open(env["FAKE_MPI_LOG"]) as f:
            self.assertEqual(f.read().split("\n")[:6], ["-f", hosts, "-ppn", "2", "-n", "2"])
        # without mpirun: a clear error
        env["PATH"] = "/nonexistent"
        p, _ = self.run_acc("launch", "--config_file", cfg, PROBE, env=env)
        self.assertEqual(p.returncode, 1)
        self.assertIn("mpirun or mpiexec were not found", p.stderr)

    # --- acc config ----------------------------------------------------------------------------------------------
    def config_cmd(self, *args, answers=None, env=None):
        env = env or self.env
        r = subprocess.run([ACC, "config", *args], input=answers, capture_output=True, text=True, env=env,
                           cwd=self.tmp, timeout=30)
        return r

    def test_config_questionnaire(self):
        # The questions of `accelerate config`, answered through a pipe: multi-CPU, 1 machine, 4 processes, bf16.
        path = os.path.join(self.tmp, "q.yaml")
        answers = "\n".join(["0", "1", "1", "no", "no", "no", "4", "bf16"]) + "\n"
        r = self.config_cmd("--config_file", path, answers=answers)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Which type of machine are you using?", r.stdout)
        self.assertIn("How many processes should be used for distributed training? [1]:", r.stdout)
        self.assertIn("acc configuration saved at " + path, r.stdout)
        text = open(path).read()
        for line in ("distributed_type: MULTI_CPU", "num_processes: 4", "mixed_precision: bf16", "use_cpu: true",
                     "compute_environment: LOCAL_MACHINE", "tpu_env: []"):
            self.assertIn(line + "\n", text)
        # the file drives acc launch
        p, _ = self.run_acc("launch", "--config_file", path, PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(self.envs()), [0, 1, 2, 3])
        self.assertEqual({e["ACCELERATE_MIXED_PRECISION"] for e in self.envs().values()}, {"bf16"})
        # multi-GPU, two machines: the machine questions, then FSDP 2 with its questions
        path2 = os.path.join(self.tmp, "q2.json")
        answers = "\n".join(["0", "multi-GPU", "2", "1", "10.0.0.1", "29400", "yes", "no",  # machines, debug
                             "no",  # dynamo
                             "no",  # DeepSpeed
                             "yes", "1", "yes", "no", "1", "", "0", "yes", "no",  # FSDP 2 ... activation ckpt
                             "no",  # parallelism config
                             "8", "all", "2"]) + "\n"  # processes, GPU ids, bf16
        r = self.config_cmd("--config_file", path2, answers=answers)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        cfg = json.load(open(path2))
        self.assertEqual(cfg["distributed_type"], "FSDP")
        self.assertEqual(cfg["machine_rank"], 1)
        self.assertEqual(cfg["main_process_ip"], "10.0.0.1")
        self.assertEqual(cfg["num_processes"], 8)
        self.assertEqual(cfg["mixed_precision"], "bf16")
        self.assertEqual(cfg["fsdp_config"]["fsdp_version"], 2)
        self.assertEqual(cfg["fsdp_config"]["fsdp_auto_wrap_policy"], "SIZE_BASED_WRAP")
        self.assertTrue(cfg["fsdp_config"]["fsdp_reshard_after_forward"])
        # running out of answers is an error, not a hang; bad answers are asked again
        r = self.config_cmd("--config_file", path, answers="0\n7000\n")
        self.assertEqual(r.returncode, 1)
        self.assertIn("Please enter a number between 0 and 10", r.stdout)
        self.assertIn("end of input", r.stderr)

    def test_config_default_update_and_locations(self):
        r = self.config_cmd("default", "--mixed_precision", "bf16")
        self.assertEqual(r.returncode, 0, r.stderr)
        hf = os.path.join(self.home, ".cache", "huggingface", "accelerate", "default_config.yaml")
        self.assertIn("saved at " + hf, r.stdout)  # where accelerate would look, so both tools share it
        text = open(hf).read()
        self.assertIn("mixed_precision: bf16\n", text)
        self.assertIn("distributed_type: ", text)
        r = self.config_cmd("default")
        self.assertEqual(r.returncode, 1)
        self.assertIn("will not override", r.stdout)
        # update: an old file comes back with current keys
        old = self.write("old.yaml", "distributed_type: MULTI_GPU\nfp16: true\nnum_processes: 2\n"
                                      "fsdp_config:\n  sharding_strategy: 2\ndynamo_backend: inductor\n")
        r = self.config_cmd("update", "--config_file", old)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = open(old).read()
        self.assertIn("mixed_precision: fp16\n", text)
        self.assertIn("dynamo_config:\n  dynamo_backend: INDUCTOR\n", text)
        self.assertIn("fsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n", text)
        self.assertNotIn("fp16: true", text)
        r = self.config_cmd("update", "--config_file", os.path.join(self.tmp, "missing.yaml"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("does not exist", r.stderr)

    def test_acc_test_and_explain_refuse_huge_process_counts(self):
        # `acc test` and `acc config explain` take the launch options: 4294967296 was cut to an int (SIGFPE).
        # (ACC_SELFTEST: any program; the torch-free build has no acc-selftest, and the options fail first anyway)
        r = subprocess.run([ACC, "test", "--num_processes", "4294967296"], capture_output=True, text=True, timeout=30,
                           env=dict(self.env, ACC_SELFTEST="/bin/true"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("must be an integer between 1 and 65536", r.stderr)
        f = self.write("huge.yaml", "distributed_type: MULTI_CPU\nnum_processes: 4294967296\n")
        r = self.config_cmd("explain", "--config_file", f)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("'num_processes' must be an integer between 1 and 65536; got 4294967296", r.stderr)
        # a FIFO or /dev/zero as the config file: refused at once
        fifo = os.path.join(self.tmp, "fifo.yaml")
        os.mkfifo(fifo)
        for path in (fifo, "/dev/zero"):
            r = self.config_cmd("explain", "--config_file", path)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("it is not a regular file", r.stderr)

    def test_config_explain(self):
        f = self.write("e.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: fp16\n")
        env = dict(self.env, ACCELERATE_GRADIENT_ACCUMULATION_STEPS="4")
        r = self.config_cmd("explain", "--config_file", f, "--mixed-precision", "bf16", "--explicit",
                            '{"seed": 3}', env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertRegex(out, r"num_processes +2 +file  " + re.escape(f) + ":2")
        self.assertRegex(out, r"\n  mixed_precision +\"bf16\" +flag  --mixed-precision")
        self.assertRegex(out, r"machine_rank +0 +default")
        self.assertRegex(out, r"\n  mixed_precision +\"bf16\" +env  ACCELERATE_MIXED_PRECISION  <- set by acc launch "
                              r"from mixed_precision \(flag  --mixed-precision\)")
        self.assertRegex(out, r"gradient_accumulation_steps +4 +env  ACCELERATE_GRADIENT_ACCUMULATION_STEPS  <- from "
                              r"acc's own environment")
        self.assertRegex(out, r"seed +3 +explicit  --explicit")
        # JSON, and the same validation as acc launch
        r = self.config_cmd("explain", "--config_file", f, "--json")
        d = json.loads(r.stdout)
        self.assertEqual(d["launch"]["provenance"]["num_processes"], {"origin": "file", "where": f + ":2"})
        self.assertEqual(d["library"]["config"]["mixed_precision"], "fp16")
        r = self.config_cmd("explain", "--config_file", f, "--cpu", "--gpu_ids", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("acc launch would refuse this config: contradictory settings", r.stderr)
        self.assertRegex(r.stdout, r"gpu_ids +\"0\" +flag  --gpu_ids")  # still explained, to find the culprit
        r = self.config_cmd("explain", "--config_file", f, "--mixed_precision", "fp32")
        self.assertEqual(r.returncode, 2)  # a bad value cannot be explained: the error says it all
        self.assertIn("'mixed_precision' must be one of", r.stderr)
        r = self.config_cmd("explain", "--use_megatron_lm", "--num_processes", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("libacc programs would refuse this config: 'use_megatron_lm' = true", r.stdout)

    def test_config_schema_validates_files(self):
        r = self.config_cmd("schema")
        self.assertEqual(r.returncode, 0)
        schema = json.loads(r.stdout)
        self.assertEqual(schema["required"], ["distributed_type"])
        self.assertIn("fsdp_version", schema["properties"]["fsdp_config"]["properties"])
        lib = json.loads(self.config_cmd("schema", "--library").stdout)
        self.assertIn("even_batches", lib["properties"]["dataloader_config"]["properties"])
        # A small validator of the subset the schema uses: the good JSON config passes, broken ones do not.
        good = json.load(open(os.path.join(DATA, "cpu_config.json")))
        self.assertEqual(validate(schema, good), [])
        self.assertTrue(validate(schema, dict(good, mixed_precison="fp16")))
        self.assertTrue(validate(schema, dict(good, mixed_precision="fp32")))
        self.assertTrue(validate(schema, dict(good, num_processes=0)))
        self.assertEqual(validate(schema, dict(good, num_processes=-1)), [])  # Accelerate's "pass --num_processes"
        self.assertTrue(validate(schema, dict(good, main_process_port=70000)))
        self.assertTrue(validate(schema, {"num_processes": 2}))  # distributed_type is required
        self.assertEqual(validate(schema, dict(good, fsdp_config={"fsdp_version": 2})), [])
        self.assertTrue(validate(schema, dict(good, fsdp_config={"fsdp_version": 3})))
        self.assertEqual(validate(lib, {"dataloader_config": {"even_batches": False}, "seed": 1}), [])
        self.assertTrue(validate(lib, {"dataloader_config": {"even_batchs": False}}))

    # --- acc env, acc estimate-memory, acc test ---------------------------------------------------------------------
    def test_env_command(self):
        f = self.write("c.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n")
        env = dict(self.env, ACC_LIBACC="/nonexistent/libacc.so.1", ACCELERATE_MIXED_PRECISION="bf16")
        r = subprocess.run([ACC, "env", "--config_file", f], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("- `acc` version: ", r.stdout)
        self.assertRegex(r.stdout, r"- libacc(: not found| version)")
        self.assertIn("- System RAM: ", r.stdout)
        self.assertIn("\t- ACCELERATE_MIXED_PRECISION=bf16", r.stdout)
        self.assertIn("- `acc` config passed: " + f, r.stdout)
        self.assertIn("\t- num_processes: 2", r.stdout)
        r = subprocess.run([ACC, "env"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("- `acc` default config:\n\tNot found", r.stdout)

    def test_env_gpus_from_nvidia_smi(self):
        # Without the driver's /proc entries, GPUs are listed by `nvidia-smi -L`, run without a shell (here from a
        # directory whose name has a space and a quote). One that is missing, fails or is killed means no GPUs.
        if os.path.isdir("/proc/driver/nvidia/gpus") and os.listdir("/proc/driver/nvidia/gpus"):
            self.skipTest("this machine's GPUs are found in /proc/driver/nvidia/gpus, before nvidia-smi")
        bindir = os.path.join(self.tmp, "nvidia's bin")
        os.mkdir(bindir)
        smi = os.path.join(bindir, "nvidia-smi")
        env = dict(self.env, ACC_LIBACC="/nonexistent/libacc.so.1", PATH=bindir + ":/usr/bin:/bin")
        env.pop("CUDA_VISIBLE_DEVICES", None)

        def acc_env(script):
            if script is None:
                if os.path.exists(smi):
                    os.remove(smi)
            else:
                with open(smi, "w") as f:
                    f.write("#!/bin/sh\n" + script)
                os.chmod(smi, 0o755)
            r = subprocess.run([ACC, "env"], capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout

        out = acc_env('[ "$1" = -L ] || exit 2\necho "GPU 0: Fake GPU A (UUID: GPU-0)"\n'
                      'echo "GPU 1: Fake GPU B (UUID: GPU-1)"\n')
        self.assertIn("- GPUs: 2 (Fake GPU A, Fake GPU B), 2 visible; found with nvidia-smi", out)
        for script in (None, "exit 9\n", "kill -KILL $$\n", "echo 'NVIDIA-SMI has failed' >&2; exit 9\n"):
            self.assertIn("- GPUs: none found", acc_env(script), script)

    def test_estimate_memory(self):
        r = subprocess.run([ACC, "estimate-memory", "gpt2"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [l for l in r.stdout.splitlines() if l.startswith("│") and "Memory" not in l]
        cells = [[c.strip() for c in l.strip("│").split("│")] for l in rows]
        self.assertEqual(cells[0], ["dtype", "Largest Layer", "Total Size", "Training using Adam"])
        # GPT-2 small: 124,439,808 parameters (tied head); the largest layer is the token embedding.
        self.assertEqual(cells[1], ["float32", "147.24 MB", "474.7 MB", "1.85 GB"])
        self.assertEqual(cells[2], ["float16", "73.62 MB", "237.35 MB", "949.4 MB"])
        self.assertEqual(cells[3], ["int8", "36.81 MB", "118.68 MB", "N/A"])
        self.assertEqual(cells[4], ["int4", "18.4 MB", "59.34 MB", "N/A"])
        self.assertIn("124,439,808 parameters", r.stdout)
        self.assertIn("Memory Usage for loading `gpt2`", r.stdout)
        lines = r.stdout.splitlines()
        self.assertEqual(len({len(l) for l in lines[:10]}), 1, r.stdout)  # a rectangle
        # Each process's share under DDP and the ZeRO stages (default 8 processes; here 4): P = 124,439,808,
        # largest layer 38,597,376 parameters.
        self.assertIn("Training using Adam, per process of 8", r.stdout)
        r = subprocess.run([ACC, "estimate-memory", "gpt2", "--num_processes", "4"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        stages = [[c.strip() for c in l.strip("│").split("│")] for l in r.stdout.splitlines()
                  if l.startswith("│") and ("ZeRO" in l or "DDP" in l or "Strategy" in l)]
        self.assertEqual(stages, [["Strategy", "float32", "Mixed precision"],
                                  ["DDP", "1.85 GB", "1.85 GB"],            # 16 P
                                  ["ZeRO-1", "1.16 GB", "830.73 MB"],       # 8 P + 8 P / 4; 4 P + 12 P / 4
                                  ["ZeRO-2", "830.73 MB", "652.71 MB"],     # 4 P + 12 P / 4; 2 P + 14 P / 4
                                  ["ZeRO-3 / FSDP", "621.94 MB", "548.32 MB"]])  # 16 P / 4 + 4 or 2 x largest
        for bad in ("0", "x", "-3"):
            r = subprocess.run([ACC, "estimate-memory", "gpt2", "--num_processes", bad], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"--num_processes: '{bad}' is not a number of processes", r.stderr)
        # Hostile sizes (issue 12): a billion layers was killed for memory, products of large sizes overflowed to a
        # negative parameter count; a shape beyond 64 bits in a safetensors header aborted the launcher.
        huge = os.path.join(self.tmp, "huge")
        os.makedirs(huge)
        for config, message in (('"num_hidden_layers": 1000000000', "'num_hidden_layers' must be an integer between 1 and 65536"),
                                ('"num_hidden_layers": 1', "more than 2^63")):
            with open(os.path.join(huge, "config.json"), "w") as f:
                f.write('{"architectures": ["LlamaForCausalLM"], "vocab_size": 2147483648, "hidden_size": 2147483648,'
                        ' "intermediate_size": 2147483648, "num_attention_heads": 2, ' + config + '}')
            r = subprocess.run([ACC, "estimate-memory", huge], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(message, r.stderr)
        header = json.dumps({"w": {"dtype": "F32", "shape": [99999999999999999999], "data_offsets": [0, 4]}}).encode()
        with open(os.path.join(self.tmp, "big.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + bytes(4))
        r = subprocess.run([ACC, "estimate-memory", os.path.join(self.tmp, "big.safetensors")], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn('tensor "w" has a bad shape', r.stderr)
        # GPT-2's Hugging Face config.json (in a model directory) gives GPT-2's table
        model_dir = os.path.join(self.tmp, "gpt2-config")
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            f.write('{"architectures": ["GPT2LMHeadModel"], "vocab_size": 50257, "n_positions": 1024, "n_embd": 768,'
                    ' "n_layer": 12, "n_head": 12, "n_inner": null}')
        r = subprocess.run([ACC, "estimate-memory", model_dir], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [l for l in r.stdout.splitlines() if l.startswith("│") and "Memory" not in l]
        self.assertEqual([c.strip() for c in rows[1].strip("│").split("│")], ["float32", "147.24 MB", "474.7 MB", "1.85 GB"])
        self.assertIn("124,439,808 parameters", r.stdout)
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            f.write('{"architectures": ["T5ForConditionalGeneration"]}')
        r = subprocess.run([ACC, "estimate-memory", model_dir], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("T5ForConditionalGeneration", r.stderr)
        # an MLP spec: 3*4+4 + 4*2+2 = 26 parameters; a wide title widens the last column
        spec = '{"type": "mlp", "sizes": [3, 4, 2]}'
        r = subprocess.run([ACC, "estimate-memory", spec, "--dtypes", "float32", "float16"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("│float32│   64 bytes  │104 bytes │", r.stdout)
        self.assertIn("│float16│  32.0 bytes │52.0 bytes│", r.stdout)
        self.assertEqual(len({len(l) for l in r.stdout.splitlines()[:8]}), 1, r.stdout)
        # a safetensors checkpoint: float tensors count in float32, integers at their size
        header = json.dumps({"__metadata__": {"format": "pt"},
                             "enc.weight": {"dtype": "BF16", "shape": [256, 128], "data_offsets": [0, 65536]},
                             "enc.bias": {"dtype": "BF16", "shape": [256], "data_offsets": [65536, 66048]},
                             "steps": {"dtype": "I64", "shape": [1], "data_offsets": [66048, 66056]}}).encode()
        st = os.path.join(self.tmp, "m.safetensors")
        with open(st, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + bytes(66056))
        r = subprocess.run([ACC, "estimate-memory", st, "--dtypes", "float32"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("129.0 KB", r.stdout)  # enc: (256*128 + 256) * 4 bytes
        self.assertIn("129.01 KB", r.stdout)  # + 8 bytes of steps
        self.assertIn("largest layer: enc", r.stdout)
        for bad, msg in (("bert-base-cased", "does not download models from the Hub"),
                         ('{"type": "gpt", "vocab_size": 10}', "is required"),
                         ('{"type": "gpt", "vocab_size": 10, "block_size": 4, "n_layer": 1, "n_head": 3, "n_embd": 8}',
                          "must be a multiple of 'n_head'"),
                         ('{"type": "mlp", "size": [1, 2]}', "did you mean 'sizes'"),
                         ('{"type": "mlp", "sizes": [1, 2],}', "model spec: malformed JSON at line 1, column 33")):
            r = subprocess.run([ACC, "estimate-memory", bad], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn(msg, r.stderr)
        # a malformed safetensors header names the file and where the JSON breaks
        header = b'{"w": {"dtype": "F32", "shape": [1] "data_offsets": [0, 4]}}'
        with open(st, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + bytes(4))
        r = subprocess.run([ACC, "estimate-memory", st], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn(st + ": malformed header: malformed JSON at line 1, column 37", r.stderr)

    def test_merge_weights(self):
        # A sharded safetensors checkpoint (as acc_save_model and save_pretrained write it) into one file: every
        # tensor's dtype, shape and bytes unchanged, {"format": "pt"} metadata; bad checkpoints refused naming the file.
        import random

        def write_st(path, tensors):  # tensors: [(name, dtype, shape, bytes)]
            header, offset = {"__metadata__": {"format": "pt"}}, 0
            for name, dtype, shape, data in tensors:
                header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
                offset += len(data)
            h = json.dumps(header).encode()
            h += b" " * ((8 - len(h) % 8) % 8)
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors))

        def read_st(path):
            with open(path, "rb") as f:
                raw = f.read()
            (n,) = struct.unpack("<Q", raw[:8])
            header = json.loads(raw[8:8 + n])
            meta = header.pop("__metadata__", None)
            return meta, {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
                          for k, v in header.items()}, list(header)

        rnd = random.Random(5)
        tensors = [("wte.weight", "F32", [16, 8], rnd.randbytes(512)), ("h.0.ln.bias", "BF16", [8], rnd.randbytes(16)),
                   ("h.0.fc.weight", "F16", [8, 8], rnd.randbytes(128)), ("steps", "I64", [1], rnd.randbytes(8)),
                   ("h.1.fc.weight", "F32", [8, 32], rnd.randbytes(1024)), ("scalar", "F32", [], rnd.randbytes(4))]
        ckpt = os.path.join(self.tmp, "ckpt")
        os.makedirs(ckpt)
        shards = [tensors[:3], tensors[3:5], tensors[5:]]
        weight_map = {}
        for i, part in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            write_st(os.path.join(ckpt, name), part)
            weight_map.update({t[0]: name for t in part})
        index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map}
        with open(os.path.join(ckpt, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)
        out = os.path.join(self.tmp, "merged")
        r = subprocess.run([ACC, "merge-weights", ckpt, out], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Saved 6 tensors (1692 bytes) from 3 shards", r.stdout)
        self.assertEqual(sorted(os.listdir(out)), ["model.safetensors"])
        meta, got, order = read_st(os.path.join(out, "model.safetensors"))
        self.assertEqual(meta, {"format": "pt"})
        self.assertEqual(order, [t[0] for t in tensors])  # the shards' order
        self.assertEqual(got, {t[0]: (t[1], t[2], t[3]) for t in tensors})

        def refused(expect, *extra):
            r = subprocess.run([ACC, "merge-weights", ckpt, os.path.join(self.tmp, "bad"), *extra],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn(expect, r.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "bad", "model.safetensors")))

        # --unsafe_serialization is accepted (in Accelerate the flag selects safetensors); still safetensors
        r = subprocess.run([ACC, "merge-weights", ckpt, out, "--unsafe_serialization"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["model.safetensors"])
        self.assertEqual(read_st(os.path.join(out, "model.safetensors"))[1], got)
        # a tensor in two shards
        third = os.path.join(ckpt, "model-00003-of-00003.safetensors")
        write_st(third, tensors[5:] + tensors[:1])
        refused("tensor 'wte.weight' is in two shards: model-00001-of-00003.safetensors and "
                "model-00003-of-00003.safetensors")
        # a missing shard
        os.remove(third)
        refused(third + ": missing shard")
        write_st(third, tensors[5:])
        # a bad index
        index_path = os.path.join(ckpt, "model.safetensors.index.json")
        with open(index_path, "w") as f:
            f.write('{"metadata": {}, "weight_map": ')
        refused(index_path + ": bad index")
        with open(index_path, "w") as f:
            json.dump({"metadata": {}}, f)
        refused(index_path + ': bad index: no "weight_map" object')
        with open(index_path, "w") as f:
            json.dump(dict(index, weight_map=dict(weight_map, extra="model-00003-of-00003.safetensors")), f)
        refused("model-00003-of-00003.safetensors: has no tensor 'extra'")
        os.remove(index_path)
        refused(index_path + ": not found")
        # --remove_checkpoint_dir: the sharded checkpoint goes once the merged file is written
        with open(index_path, "w") as f:
            json.dump(index, f)
        out2 = os.path.join(self.tmp, "merged2")
        r = subprocess.run([ACC, "merge-weights", ckpt, out2, "--remove_checkpoint_dir"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(ckpt))
        self.assertEqual(read_st(os.path.join(out2, "model.safetensors"))[1], got)

        # --remove_checkpoint_dir removes only the checkpoint's own files (the index and the shards it names), and the
        # folder when nothing else is left in it; an output that is the folder or lies inside it is refused before
        # anything is written (issue 23), whether it exists or not, through a link or a trailing "/" too.
        def sharded(path):
            os.makedirs(path)
            for i, part in enumerate(shards):
                write_st(os.path.join(path, f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"), part)
            with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
                json.dump(index, f)

        ck = os.path.join(self.tmp, "ck")
        sharded(ck)
        for name, text in (("config.json", "{}"), ("notes.txt", "mine")):
            with open(os.path.join(ck, name), "w") as f:
                f.write(text)
        before = sorted(os.listdir(ck))
        os.symlink(ck, os.path.join(self.tmp, "ck_link"))
        for inside in (os.path.join(ck, "merged"), ck, ck + "/", os.path.join(ck, "sub", ".."),
                       os.path.join(self.tmp, "ck_link", "merged"), os.path.join(ck, "a", "b")):
            r = subprocess.run([ACC, "merge-weights", ck + "/", inside, "--remove_checkpoint_dir"], capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 2, (inside, r.stdout))
            self.assertIn("is inside the checkpoint directory", r.stderr)
            self.assertEqual(sorted(os.listdir(ck)), before, inside)
        r = subprocess.run([ACC, "merge-weights", ck, os.path.join(self.tmp, "ck_out"), "--remove_checkpoint_dir"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(ck)), ["config.json", "notes.txt"])
        self.assertIn("kept the directory and what is not the checkpoint's: config.json, notes.txt", r.stdout)
        with open(os.path.join(ck, "notes.txt")) as f:
            self.assertEqual(f.read(), "mine")
        # An output that contains the checkpoint folder is fine (the merged file is not the checkpoint's).
        outer = os.path.join(self.tmp, "outer")
        sharded(os.path.join(outer, "ck"))
        r = subprocess.run([ACC, "merge-weights", os.path.join(outer, "ck"), outer, "--remove_checkpoint_dir"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.listdir(outer), ["model.safetensors"])
        self.assertEqual(read_st(os.path.join(outer, "model.safetensors"))[1], got)

    def test_hf_folder_files_are_regular_and_bounded(self):
        # Issue 23: a FIFO as config.json, the index or a shard blocked estimate-memory and merge-weights forever; a
        # link to /dev/zero aborted them with an uncaught std::bad_alloc; a 300 MB config.json was read. Each is an
        # error naming the file, at once; and the JSON is strict (a duplicate key, text after it, bad UTF-8).
        def write_st(path, tensors):  # tensors: [(name, bytes)], F32 vectors
            header, offset = {}, 0
            for name, data in tensors:
                header[name] = {"dtype": "F32", "shape": [len(data) // 4], "data_offsets": [offset, offset + len(data)]}
                offset += len(data)
            h = json.dumps(header).encode()
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(h)) + h + b"".join(t[1] for t in tensors))

        def ckpt(name):  # a sharded checkpoint of two shards
            d = os.path.join(self.tmp, name)
            os.makedirs(d)
            write_st(os.path.join(d, "model-00001-of-00002.safetensors"), [("a", bytes(8))])
            write_st(os.path.join(d, "model-00002-of-00002.safetensors"), [("b", bytes(4))])
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                          "b": "model-00002-of-00002.safetensors"}}, f)
            return d

        def run(*args):
            r = subprocess.run([ACC, *args], capture_output=True, text=True, timeout=30)
            self.assertNotIn("terminate", r.stderr)
            return r

        def fifo(path):
            os.mkfifo(path)

        def zero(path):
            os.symlink("/dev/zero", path)

        def big(path):  # sparse: no disk used
            with open(path, "wb") as f:
                f.truncate(300 << 20)

        for name in ("model.safetensors.index.json", "model-00002-of-00002.safetensors"):
            for make in (fifo, zero):
                d = ckpt(f"merge-{len(os.listdir(self.tmp))}")
                os.remove(os.path.join(d, name))
                make(os.path.join(d, name))
                r = run("merge-weights", d, os.path.join(d + "-out"))
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(os.path.join(d, name), r.stderr)
                self.assertIn("not a regular file", r.stderr)
        for make, message in ((fifo, "it is not a regular file"), (zero, "it is not a regular file"),
                              (big, "it holds 314572800 bytes, more than the limit of 16777216")):
            d = os.path.join(self.tmp, f"model-{len(os.listdir(self.tmp))}")
            os.makedirs(d)
            make(os.path.join(d, "config.json"))
            r = run("estimate-memory", d)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"cannot read '{d}/config.json': {message}", r.stderr)
        # Strict JSON in the index; a shard named outside the folder.
        d = ckpt("strict")
        index = os.path.join(d, "model.safetensors.index.json")
        good = open(index).read()
        for text, message in ((good[:-2] + ', "a": "model-00002-of-00002.safetensors"}}', 'duplicate key "a"'),
                              (good + "\n}", "unexpected text after the JSON value"),
                              (good.replace('"metadata": {}', '"metadata": {"x": "\xff"}'), "invalid UTF-8"),
                              (good.replace('"model-00002', '"../model-00002'), "it must stay inside")):
            with open(index, "w", encoding="latin-1") as f:
                f.write(text)
            r = run("merge-weights", d, d + "-out")
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(index, r.stderr)
            self.assertIn(message, r.stderr)
        # config.json values as transformers would refuse them, in estimate-memory too.
        d = os.path.join(self.tmp, "values")
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write('{"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16,'
                    ' "num_hidden_layers": 1, "num_attention_heads": 2, "rms_norm_eps": -1e-06}')
        r = run("estimate-memory", d)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"{d}/config.json: 'rms_norm_eps' must be a number at least 0", r.stderr)
        # A 100k-entry index is merged (its weight map read in one pass).
        d = ckpt("large")
        names = [f"t.{i}" for i in range(100000)]
        write_st(os.path.join(d, "model-00001-of-00002.safetensors"), [(n, bytes(4)) for n in names[:50000]])
        write_st(os.path.join(d, "model-00002-of-00002.safetensors"), [(n, bytes(4)) for n in names[50000:]])
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"weight_map": {n: f"model-0000{1 + i // 50000}-of-00002.safetensors"
                                      for i, n in enumerate(names)}}, f)
        r = run("merge-weights", d, d + "-out")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Saved 100000 tensors (400000 bytes) from 2 shards", r.stdout)

    def test_command_line_forms(self):
        # Both spellings, --opt=value, the last occurrence wins and provenance names the spelling typed.
        env = dict(self.env, ACC_CONFIG_FILE="none")
        r = subprocess.run([ACC, "config", "explain", "--num_processes=3", "--num-processes", "4", "--debug",
                            "--debug=false"], capture_output=True, text=True, env=env, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\n  num_processes +4 +flag  --num-processes\n")
        self.assertRegex(r.stdout, r"\n  debug +false +default\n")
        r = subprocess.run([ACC, "config", "explain", "--debug=maybe"], capture_output=True, text=True, env=env,
                           timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("option '--debug' is a flag; got '=maybe' (use true or false)", r.stderr)
        # Everything from the program on is the program's, options included; "--" ends acc's options.
        for args in (["--cpu", "/bin/echo"], ["--cpu", "--", "/bin/echo"]):
            r = subprocess.run([ACC, "launch", *args, "x", "-y", "--num_processes", "5", "--", "--z=1"],
                               capture_output=True, text=True, env=env, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "x -y --num_processes 5 -- --z=1\n")
        r = subprocess.run([ACC, "launch", "--cpu", "--bogus", "/bin/echo"], capture_output=True, text=True, env=env,
                           timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown option '--bogus'", r.stderr)
        # nargs="+": several values, repeated, or with commas
        r = subprocess.run([ACC, "estimate-memory", "gpt2", "--dtypes", "float16", "bfloat16", "--dtypes=int8,int4"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [l.split("│")[1].strip() for l in r.stdout.splitlines() if l.startswith("│") and "MB" in l]
        self.assertEqual(rows[:4], ["float16", "bfloat16", "int8", "int4"])  # then the per-process table's rows
        r = subprocess.run([ACC, "estimate-memory", "gpt2", "--dtypes"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("option '--dtypes' needs a value", r.stderr)

    def test_help_for_every_command(self):
        for cmd, words in ((["launch"], ["--max_restarts", "--tee", "--log_dir", "--gpu_ids", "--rdzv_conf",
                                         "[mixed_precision; default \"no\"]", "--fsdp_version", "--zero_stage"]),
                           (["config"], ["default", "update", "explain", "schema"]),
                           (["config", "default"], ["--mixed_precision"]),
                           (["config", "update"], ["--config_file"]),
                           (["config", "explain"], ["--explicit", "--num_processes", "--json"]),
                           (["config", "schema"], ["--library"]),
                           (["env"], ["--config_file"]),
                           (["test"], ["--timeout", "--num_processes", "--steps"]),
                           (["estimate-memory"], ["--dtypes", "gpt2"])):
            r = subprocess.run([ACC, *cmd, "--help"], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, cmd)
            for w in words:
                self.assertIn(w, r.stdout, cmd)
        r = subprocess.run([ACC, "help", "test"], capture_output=True, text=True, timeout=30)
        self.assertIn("--timeout", r.stdout)
        r = subprocess.run([ACC, "--help"], capture_output=True, text=True, timeout=30)
        for c in ("launch", "config", "env", "test", "estimate-memory"):
            self.assertIn(c, r.stdout)
        r = subprocess.run([ACC, "estimat-memory"], capture_output=True, text=True, timeout=30)
        self.assertIn("did you mean 'estimate-memory'", r.stderr)

    # --- the command -------------------------------------------------------------------------------------------
    def test_help_and_version(self):
        p, took = self.run_acc("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("launch", p.stdout)
        p, _ = self.run_acc("launch", "--help")
        self.assertEqual(p.returncode, 0)
        for opt in ("--num_processes", "--config_file", "--main_process_port", "--cpu", "--mixed_precision"):
            self.assertIn(opt, p.stdout)
        p, took = self.run_acc("--version")
        self.assertEqual(p.returncode, 0)
        self.assertRegex(p.stdout, r"^acc \d+\.\d+\.\d+")
        self.assertLess(took, 2.0)  # no LibTorch to load (milliseconds; generous for loaded machines)
        p, _ = self.run_acc("lunch")
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown command 'lunch'", p.stderr)

    def test_acc_does_not_link_torch(self):
        ldd = shutil.which("ldd")
        if not ldd:
            self.skipTest("no ldd")
        out = subprocess.run([ldd, ACC], capture_output=True, text=True, timeout=30).stdout
        # The libraries' names and paths, not their load addresses (a random address can read "...c10...").
        libraries = re.sub(r"\(0x[0-9a-f]+\)", "", out)
        self.assertNotIn("torch", libraries)
        self.assertNotIn("c10", libraries)


if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:  # for meson: one test per method
        print("\n".join(unittest.defaultTestLoader.getTestCaseNames(LaunchTest)))
        sys.exit(0)
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    ACC, PROBE, DATA = (os.path.abspath(a) for a in sys.argv[1:4])
    names = sys.argv[4:]
    suite = (unittest.defaultTestLoader.loadTestsFromNames([f"LaunchTest.{n}" for n in names],
                                                           sys.modules[__name__])
             if names else unittest.defaultTestLoader.loadTestsFromTestCase(LaunchTest))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
