#!/usr/bin/env python3
"""`acc test` and multi-machine training with libacc: real processes, a real process group, DDP.

usage: test_multinode.py ACC ACC_SELFTEST [test names...]
       test_multinode.py --list

  - acc test on one machine: every step passes; a config libacc refuses fails at the exact step, with the reason;
    a peer that never comes fails the rendezvous after --timeout instead of hanging;
  - the run record libacc writes into the project directory (main process only);
  - two machines on loopback: two `acc test` launchers (machine ranks 0 and 1, two processes each) train 4 ranks
    with DDP, parameters checked equal on every rank;
  - two machines as network namespaces joined by a veth pair (made and removed here; the test says so and skips,
    exit 77, where namespaces are not allowed): the same 4-rank DDP run across them, and a machine that never
    arrives gives a clear timeout error on the one that did.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from netns import two_machines  # noqa: E402
from test_launch import free_port  # noqa: E402  (a port free with the next one: machine 0 gives PORT + 1 out)

ACC = SELFTEST = None
SKIP = 77


class MultiNodeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="acc-multinode-")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("ACCELERATE_", "FSDP_", "ACC_", "MASTER_", "OMP_", "XDG_", "HF_", "GLOO_"))
                    and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
        self.env.update(HOME=self.tmp, ACC_CONFIG_FILE="none", ACC_SELFTEST=SELFTEST, OMP_NUM_THREADS="1")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, args, env=None, prefix=()):
        n = len(self.procs)
        out, err = os.path.join(self.tmp, f"{n}.out"), os.path.join(self.tmp, f"{n}.err")
        with open(out, "w") as o, open(err, "w") as e:
            p = subprocess.Popen([*prefix, ACC, *args], env=env or self.env, cwd=self.tmp, stdout=o, stderr=e,
                                 stdin=subprocess.DEVNULL)
        p.files = (out, err)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=120):
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            self.fail(f"{p.args} ran more than {timeout} s")
        with open(p.files[0]) as o, open(p.files[1]) as e:
            return rc, o.read(), e.read()

    # --- acc test on one machine ---------------------------------------------------------------------------------
    def test_acc_test_passes(self):
        rc, out, err = self.finish(self.start(["test", "--num_processes", "2", "--steps", "3"]))
        self.assertEqual(rc, 0, out + err)
        self.assertIn("rendezvous        ok      rank 0 of 2 on cpu (MULTI_CPU)", out)
        self.assertIn("first collective  ok      all-reduce sum 3", out)
        self.assertRegex(out, r"ddp step          ok      3 steps, loss [0-9.]+ -> [0-9.]+, parameters equal on all 2 "
                              r"ranks")
        self.assertIn("Test is a success! You are ready for your distributed training!", out)

    def test_acc_test_names_the_failing_step(self):
        # A paradigm libacc does not have: refused in acc_accelerator_create, with the key and where it came from.
        rc, out, err = self.finish(self.start(["test", "--num_processes", "2", "--use_megatron_lm"]))
        self.assertNotEqual(rc, 0)
        self.assertIn("acc test: FAILED at step 'rendezvous'", out)
        self.assertIn("ACC_ERR_UNSUPPORTED", out)
        self.assertIn("'use_megatron_lm' = true (from env ACCELERATE_USE_MEGATRON_LM): Megatron-LM is not supported yet "
                      "by libacc", out)
        self.assertIn("first collective  not reached", out)
        # A peer that never comes: srun said 2 tasks, only one runs. The rendezvous times out, it does not hang.
        env = dict(self.env, SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NODEID="0",
                   SLURM_NNODES="1", SLURM_STEP_ID="0")
        t0 = time.monotonic()
        rc, out, err = self.finish(self.start(["test", "--timeout", "3", "--main_process_port", str(free_port())],
                                              env=env))
        self.assertNotEqual(rc, 0)
        self.assertLess(time.monotonic() - t0, 60)
        self.assertIn("acc test: FAILED at step 'rendezvous': rank 0: ACC_ERR_DISTRIBUTED", out)

    def test_env_finds_libacc(self):
        # Beside acc in the build tree: acc env dlopens libacc only to read its version and build.
        rc, out, err = self.finish(self.start(["env"]))
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"- libacc version: \d+\.\d+\.\d+")
        build = json.loads(out.split("- libacc build: ", 1)[1].splitlines()[0])
        self.assertIn("torch", build)
        self.assertIn("gloo", build["backends"])

    def test_run_record_in_the_project_directory(self):
        project = os.path.join(self.tmp, "runs", "exp1")
        env = dict(self.env, ACC_SELFTEST_PROJECT_DIR=project, ACCELERATE_GRADIENT_ACCUMULATION_STEPS="2")
        rc, out, err = self.finish(self.start(["test", "--num_processes", "2", "--mixed_precision", "bf16"], env=env))
        self.assertEqual(rc, 0, out + err)
        self.assertEqual(os.listdir(project), ["acc_run_config.json"])  # main process only, no temporary left
        with open(os.path.join(project, "acc_run_config.json")) as f:
            record = json.load(f)
        self.assertEqual(record["format"], "acc_run_config/1")
        self.assertIn("torch", record["build"])
        self.assertEqual(record["config"]["mixed_precision"], "bf16")
        self.assertEqual(record["provenance"]["mixed_precision"],
                         {"origin": "env", "where": "ACCELERATE_MIXED_PRECISION"})
        self.assertEqual(record["config"]["gradient_accumulation_steps"], 2)
        self.assertEqual(record["provenance"]["project_dir"], {"origin": "explicit", "where": "acc_accelerator_create"})
        self.assertEqual(record["environment"]["WORLD_SIZE"], "2")
        self.assertEqual(record["process"]["argv"][0], SELFTEST)

    # --- two machines ---------------------------------------------------------------------------------------------
    def two_machines(self, ip0, env0, env1, prefix0=(), prefix1=(), steps="5"):
        port = free_port()
        common = ["test", "--num_processes", "4", "--num_machines", "2", "--main_process_ip", ip0,
                  "--main_process_port", str(port), "--steps", steps, "--rdzv_conf", "join_timeout=60"]
        m1 = self.start(common + ["--machine_rank", "1"], env=env1, prefix=prefix1)
        m0 = self.start(common + ["--machine_rank", "0"], env=env0, prefix=prefix0)
        r0, r1 = self.finish(m0), self.finish(m1)
        for rc, out, err in (r0, r1):
            self.assertEqual(rc, 0, out + err)
            self.assertIn("Test is a success!", out)
            self.assertRegex(out, r"parameters equal on all 4 ranks")
        self.assertIn("rank 0 of 4", r0[1])
        self.assertIn("rank 2 of 4", r1[1])
        return r0, r1

    def test_acc_test_on_two_loopback_machines(self):
        self.two_machines("127.0.0.1", self.env, self.env)

    def test_two_machines_as_network_namespaces(self):
        with two_machines() as m:
            if m is None:
                raise unittest.SkipTest("no network namespaces here; the loopback test covers two machines")
            self.namespaced_machines(m)
        leftover = subprocess.run([m.ip, "link", "show", m.veth[0]], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(leftover.returncode, 0, "veth left behind")

    def namespaced_machines(self, m):
        veth, addrs = m.veth, m.addrs
        try:
            # Each "machine" binds its veth for Gloo, as a real cluster names its interface.
            env = [dict(self.env, GLOO_SOCKET_IFNAME=veth[i]) for i in range(2)]
            prefix = m.prefix
            self.two_machines(addrs[0], env[0], env[1], prefix[0], prefix[1])
            # A machine that never arrives: machine 0 alone gives up after the join timeout, clearly.
            port = free_port()
            t0 = time.monotonic()
            rc, out, err = self.finish(self.start(
                ["launch", "--num_processes", "4", "--num_machines", "2", "--machine_rank", "0", "--main_process_ip",
                 addrs[0], "--main_process_port", str(port), "--rdzv_conf", "join_timeout=2", SELFTEST],
                env=env[0], prefix=prefix[0]))
            self.assertEqual(rc, 1, out + err)
            self.assertLess(time.monotonic() - t0, 30)
            self.assertIn("rendezvous timed out after 2 s: 1 of 2 machines joined (missing machine rank 1)", err)
            # ... and the other side of a partition: machine 1 cannot reach machine 0's address.
            rc, out, err = self.finish(self.start(
                ["launch", "--num_processes", "4", "--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                 addrs[0], "--main_process_port", str(port), "--rdzv_conf", "join_timeout=2", SELFTEST],
                env=env[1], prefix=prefix[1]))
            self.assertEqual(rc, 1, out + err)
            self.assertIn(f"could not reach machine 0 at {addrs[0]}:{port}", err)
        finally:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)


if __name__ == "__main__":
    if sys.argv[1:] == ["--list"]:
        print("\n".join(unittest.defaultTestLoader.getTestCaseNames(MultiNodeTest)))
        sys.exit(0)
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ACC, SELFTEST = (os.path.abspath(a) for a in sys.argv[1:3])
    names = sys.argv[3:]
    suite = (unittest.defaultTestLoader.loadTestsFromNames([f"MultiNodeTest.{n}" for n in names],
                                                           sys.modules[__name__])
             if names else unittest.defaultTestLoader.loadTestsFromTestCase(MultiNodeTest))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if result.wasSuccessful() and result.skipped and len(result.skipped) == result.testsRun:
        sys.exit(SKIP)
    sys.exit(0 if result.wasSuccessful() else 1)
