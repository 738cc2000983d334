#!/usr/bin/env python3
"""The mlflow tracker against a real MLflow tracking server: starts `mlflow server` (a SQLite store in a temporary
folder) on a free loopback port, runs tests/c/test_mlflow_server against it, and reads what arrived with MLflow's own
client (MlflowClient): the experiment, the run's name, tags, status and times, every parameter, every metric with its
steps and values. Also: a resumed run (MLFLOW_RUN_ID), a parameter change the server refuses (the run ends FAILED),
and an unreachable server failing init_trackers at once with an error naming its URL; against a stub server: the
bearer token and basic credentials, 503 answers retried, the server's error message, a request timing out. The
server is stopped at the end whatever happens.

Usage: mlflow_server.py TEST_MLFLOW_SERVER   (run with .venv-test's Python; exits 77, skipped, without `mlflow server`)
"""
import base64
import http.server
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".venv-test")
VENV_PYTHON = os.path.join(VENV, "bin", "python")
if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    os.execv(VENV_PYTHON, [VENV_PYTHON, *sys.argv])

try:
    import mlflow.server  # noqa: F401 - what `mlflow server` imports (Flask, SQLAlchemy, ...)
    from mlflow.tracking import MlflowClient
except ImportError as e:
    print(f"SKIP: `mlflow server` cannot run here ({e}); run scripts/setup.sh --tests for .venv-test")
    sys.exit(77)

sys.path.insert(0, os.path.join(ROOT, "tests"))
from checks import expect, finish  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp):
    port = free_port()
    log = open(os.path.join(tmp, "server.log"), "w")
    mlflow_exe = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or "mlflow"
    proc = subprocess.Popen(
        [mlflow_exe, "server", "--backend-store-uri", "sqlite:///" + os.path.join(tmp, "mlflow.db"),
         "--default-artifact-root", os.path.join(tmp, "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # its own group: stopped with its workers
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, uri
        except OSError:
            time.sleep(0.5)
    log.flush()
    with open(os.path.join(tmp, "server.log")) as f:
        tail = f.read()[-3000:]
    stop_server(proc)
    raise RuntimeError(f"mlflow server did not start on {uri}:\n{tail}")


def stop_server(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(program, args, env, timeout=120):
    p = subprocess.run([program, *args], capture_output=True, text=True, errors="replace", env=env, timeout=timeout)
    expect(p.returncode == 0, f"test_mlflow_server {' '.join(args)[:60]}", (p.stdout + p.stderr)[-3000:])
    return p


def check_run(client, run, steps_of_loss, status):
    expect(run.info.run_name == "server-run", "run name", run.info.run_name)
    expect(run.info.status == status, "run status", (run.info.status, status))
    expect(run.info.end_time is not None and run.info.end_time >= run.info.start_time > 1.6e12, "run times",
           (run.info.start_time, run.info.end_time))
    tags = run.data.tags
    expect(tags.get("mlflow.runName") == "server-run" and tags.get("team") == "acc" and
           tags.get("mlflow.note.content") == "libacc through MLflow's REST API" and
           tags.get("mlflow.source.type") == "LOCAL" and tags.get("mlflow.user"), "run tags", tags)
    params = run.data.params
    want = {"lr": "0.001", "batch_size": "32", "model.name": "mlp", "amp": "False",
            **{f"p{i:03d}": str(i) for i in range(150)}}
    expect(params == want, "every parameter (155, two requests; the one over 6000 characters skipped)",
           set(params) ^ set(want))
    rid = run.info.run_id
    loss = client.get_metric_history(rid, "loss")
    expect([m.step for m in loss] == steps_of_loss, "loss steps", [m.step for m in loss])
    want_loss = [1.0 / (s + 1) for s in range(10)] + [0.05] * (len(steps_of_loss) - 10)
    expect(all(math.isclose(m.value, w, rel_tol=0, abs_tol=1e-15) for m, w in zip(loss, want_loss)), "loss values",
           [m.value for m in loss])
    expect(all(m.timestamp > 1.6e12 for m in loss), "metric timestamps")
    lr = client.get_metric_history(rid, "lr")
    expect([(m.step, m.value) for m in lr] == [(s, 0.001 * (10 - s) / 10) for s in range(10)], "lr history")
    metrics = run.data.metrics
    many = {f"m/{i:04d}" for i in range(1500)}
    expect(set(metrics) == {"loss", "lr", "nan", "inf", "ninf", "flag", "final"} | many,
           "metric names (1500 in one call: two requests; text skipped)", set(metrics) ^ many)
    for name in ("m/0000", "m/0999", "m/1000", "m/1499"):
        h = client.get_metric_history(rid, name)
        expect([(m.step, m.value) for m in h] == [(10, float(int(name[2:])))], f"history of {name}", h)
    nan = client.get_metric_history(rid, "nan")
    expect(len(nan) == 1 and math.isnan(nan[0].value) and nan[0].step == 11, "NaN", nan)
    # MLflow's SQL store keeps the infinities as the largest finite doubles, as for its own client.
    inf, ninf = metrics.get("inf"), metrics.get("ninf")
    expect(inf is not None and inf >= 1.79e308 and ninf is not None and ninf <= -1.79e308, "the infinities",
           (inf, ninf))
    expect(metrics.get("flag") == 1.0, "a boolean as 1", metrics.get("flag"))
    final = client.get_metric_history(rid, "final")
    expect([(m.step, m.value) for m in final] == [(0, 1.0)], "a value without a step (step 0)", final)


class Stub(http.server.BaseHTTPRequestHandler):
    """A server that is not a working MLflow: answers 503 to the first `unavailable` requests, then 401 with MLflow's
    error body, or holds every request `stall` seconds; records each request's Authorization header."""
    unavailable = 0
    stall = 0
    body = None  # an error body to answer with (status 400) instead of 401's
    seen = []

    def do_GET(self):  # noqa: N802 - http.server's name
        Stub.seen.append(self.headers.get("Authorization"))
        if Stub.stall:
            time.sleep(Stub.stall)
            return
        if Stub.body is not None:
            status, body = 400, Stub.body
        elif Stub.unavailable > 0:
            Stub.unavailable -= 1
            status, body = 503, b"busy"
        else:
            status, body = 401, json.dumps({"error_code": "UNAUTHENTICATED", "message": "bad credentials"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def check_stub(program, base_env):
    """What MLflow's client does with credentials, transient errors and a server that does not answer."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # A bearer token; the server's error (status, code, message) comes back naming the URL.
        Stub.seen = []
        p = run(program, ["unreachable", uri], dict(base_env, MLFLOW_TRACKING_TOKEN="tok"))
        expect(Stub.seen == ["Bearer tok"], "MLFLOW_TRACKING_TOKEN as a bearer token", Stub.seen)
        expect("HTTP 401 UNAUTHENTICATED: bad credentials" in p.stdout and uri in p.stdout,
               "the server's error in the message", p.stdout)
        # User and password before the token, as MLflow; 503 retried MLFLOW_HTTP_REQUEST_MAX_RETRIES times.
        Stub.seen, Stub.unavailable = [], 2
        env = dict(base_env, MLFLOW_TRACKING_TOKEN="tok", MLFLOW_TRACKING_USERNAME="u", MLFLOW_TRACKING_PASSWORD="p:w",
                   MLFLOW_HTTP_REQUEST_MAX_RETRIES="3", MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="0")
        p = run(program, ["unreachable", uri], env)
        basic = "Basic " + base64.b64encode(b"u:p:w").decode()
        expect(Stub.seen == [basic] * 3, "basic authentication, two 503 answers retried", Stub.seen)
        expect("HTTP 401" in p.stdout, "the answer after the retries", p.stdout)
        # A 100 KB error body with terminal escapes, as MLflow's JSON and as raw bytes (invalid UTF-8 too): the
        # message keeps a bounded, printable part of it, never the whole body or its control bytes.
        for what, body in (
                ("JSON", json.dumps({"error_code": "BAD_REQUEST",
                                     "message": "\x1b]0;owned\x07\x1b[2J" + "é" * 50_000 + "\x1b[31m"}).encode()),
                ("raw", b"\x1b[2J\x1b]0;owned\x07\r\xff\xfe" + b"x\x1b[1m" * 25_000)):
            Stub.body = body
            p = run(program, ["unreachable", uri], base_env)
            message = p.stdout.split("\n")[0]
            expect("HTTP 400" in message and uri in message, f"the {what} error body's status and URL", message[:300])
            expect(len(message.encode()) < 1000, f"the {what} error body bounded (100 KB sent)", len(message.encode()))
            expect(not any(ord(c) < 0x20 or ord(c) == 0x7F or c == "\ufffd" for c in message),
                   f"no control bytes or invalid UTF-8 from the {what} error body", repr(message[:300]))
            expect(f"{len(body)} bytes" in message or "bytes)" in message, f"the {what} body's cut said", message[:600])
        Stub.body = None
        # A server that accepts and never answers: MLFLOW_HTTP_REQUEST_TIMEOUT ends the request.
        Stub.stall = 30
        t0 = time.monotonic()
        p = run(program, ["unreachable", uri], dict(base_env, MLFLOW_HTTP_REQUEST_TIMEOUT="2"))
        expect(time.monotonic() - t0 < 15, "a request times out", time.monotonic() - t0)
        expect("timed out" in p.stdout.lower() or "timeout" in p.stdout.lower(), "the timeout named", p.stdout)
    finally:
        Stub.stall = 0
        server.shutdown()
        server.server_close()


def main(program):
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    base_env["ACC_CONFIG_FILE"] = "none"
    with tempfile.TemporaryDirectory() as tmp:
        # An unreachable server: a loopback port nobody listens on. init_trackers fails at once, naming the URL.
        dead = f"http://127.0.0.1:{free_port()}"
        t0 = time.monotonic()
        p = run(program, ["unreachable", dead], base_env)
        expect(time.monotonic() - t0 < 20, "an unreachable server fails quickly", time.monotonic() - t0)
        expect(dead in p.stdout and "mlflow" in p.stdout, "the error names the URL", p.stdout)
        check_stub(program, base_env)

        proc, uri = start_server(tmp)
        try:
            client = MlflowClient(tracking_uri=uri)
            # The URI through init_kwargs (as mlflow.set_tracking_uri), then through MLFLOW_TRACKING_URI.
            run(program, ["log", uri], base_env)
            run(program, ["log", "-"], dict(base_env, MLFLOW_TRACKING_URI=uri + "/"))
            exp = client.get_experiment_by_name("server-demo")
            expect(exp is not None, "the experiment 'server-demo'")
            if exp is None:
                return
            runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
            expect(len(runs) == 2, "two runs in one experiment (reused by name)", len(runs))
            for r in runs:
                check_run(client, r, list(range(10)), "FINISHED")
            if len(runs) != 2:
                return
            # MLFLOW_RUN_ID continues the second run; then a changed parameter is refused and the run ends FAILED.
            rid = runs[1].info.run_id
            run(program, ["resume"], dict(base_env, MLFLOW_TRACKING_URI=uri, MLFLOW_RUN_ID=rid))
            r = client.get_run(rid)
            check_run(client, r, list(range(10)) + [20], "FAILED")
            expect(r.data.params.get("lr") == "0.001", "the parameter kept its value", r.data.params.get("lr"))
            expect(len(client.search_runs([exp.experiment_id])) == 2, "no new run when resuming")
            run(program, ["unknown-run", "0" * 32], dict(base_env, MLFLOW_TRACKING_URI=uri, MLFLOW_RUN_ID="0" * 32))
        finally:
            stop_server(proc)
        expect(proc.poll() is not None, "the server is stopped")


main(sys.argv[1])
finish()
