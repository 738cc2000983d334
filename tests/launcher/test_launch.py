#!/usr/bin/env python3
"""Tests of `acc launch` with a torch-free worker (rank_probe).

usage: test_launch.py ACC RANK_PROBE DATA_DIR [test names...]
       test_launch.py --list

Every test runs in its own temporary HOME (so no user config file is read), bounds every wait, and checks with
the pids the workers wrote that no process is left behind.
"""
import os
import shutil
import signal
import socket
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
        p, _ = self.run_acc("launch", "--cpu", "--mixed_precision", "bf16", "--debug", "--gpu_ids", "0",
                            PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        e = self.envs()[0]
        self.assertEqual(e["WORLD_SIZE"], "1")
        self.assertEqual(e["ACCELERATE_USE_CPU"], "True")
        self.assertEqual(e["ACCELERATE_MIXED_PRECISION"], "bf16")
        self.assertEqual(e["ACCELERATE_DEBUG_MODE"], "true")
        self.assertEqual(e["CUDA_VISIBLE_DEVICES"], "0")
        self.assertEqual(e["KMP_BLOCKTIME"], "1")
        self.assertNotIn("OMP_NUM_THREADS", e)

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

    def test_second_machine_ranks(self):
        p, _ = self.run_acc("launch", "--num_processes", "4", "--num_machines", "2", "--machine_rank", "1",
                            "--main_process_ip", "10.9.8.7", "--main_process_port", "29999", PROBE, "--out", self.out)
        self.assertEqual(p.returncode, 0, p.stderr)
        envs = self.envs()
        self.assertEqual(sorted(envs), [2, 3])  # files are named by RANK
        for r, e in envs.items():
            self.assertEqual(e["LOCAL_RANK"], str(r - 2))
            self.assertEqual(e["WORLD_SIZE"], "4")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "2")
            self.assertEqual(e["GROUP_RANK"], "1")
            self.assertEqual(e["GROUP_WORLD_SIZE"], "2")
            self.assertEqual(e["MASTER_ADDR"], "10.9.8.7")
            self.assertEqual(e["MASTER_PORT"], "29999")
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
            (["--num_processes", "0"], "--num_processes: 'num_processes' must be an integer >= 1; got \"0\""),
            (["--num_processes", "two"], "--num_processes: 'num_processes' must be an integer"),
            (["--main_process_port", "70000"], "'main_process_port' must be an integer between 0 and 65535"),
            (["--num_procesess", "2"], "unknown option '--num_procesess' (did you mean '--num_processes'?)"),
            (["--num_processes"], "needs a value"),
            ([], "missing the PROGRAM"),
            (["--term_timeout", "-1"], "--term_timeout must be a number of seconds"),
        ]
        for args, message in cases:
            prog = [PROBE, "--out", self.out] if args != [] and args != ["--num_processes"] else []
            p, _ = self.run_acc("launch", *args, *prog)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(message, p.stderr, args)
            self.assertEqual(os.listdir(self.out), [], args)

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
        self.assertNotIn("torch", out)
        self.assertNotIn("c10", out)


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
