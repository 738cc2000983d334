#!/usr/bin/env python3
"""Reads what libacc's trackers wrote with the readers of the tools themselves: TensorBoard's
event_accumulator (scalars, text, add_scalars runs and the HParams plugin's data), the MLflow client
(MLflow's file store) and wandb's own reader of an offline run's .wandb file (wandb.sdk.internal.datastore with
wandb_internal_pb2, and `wandb sync --view`), plus the JSON lines and CSV files with the standard library.

Usage: read_trackers.py TEST_TRACKERS   (tests/c/test_trackers; run with .venv-test's Python)
"""
import csv
import json
import math
import os
import random
import subprocess
import sys
import tempfile

# Under .venv-test's Python (scripts/setup.sh makes it from tests/requirements.txt), whatever started us.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(ROOT, ".venv-test", "bin", "python")
if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(ROOT, ".venv-test")):
    os.execv(VENV_PYTHON, [VENV_PYTHON, *sys.argv])

sys.path.insert(0, os.path.join(ROOT, "tests"))
from checks import expect, finish  # noqa: E402


try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
except ImportError as e:  # no .venv-test: scripts/setup.sh makes it
    print(f"SKIP: tensorboard is not installed ({e}); run scripts/setup.sh --tests for .venv-test")
    sys.exit(77)

os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow >= 3 reads a file store only when asked to
os.environ.pop("MLFLOW_TRACKING_URI", None)

STEPS = 10
LOSS = [1.0 / (s + 1) for s in range(STEPS)]
LR = [0.001 * (10 - s) / 10 for s in range(STEPS)]


def check_tensorboard(run):
    acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0,
                                                                 event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    expect(set(tags["scalars"]) == {"loss", "lr", "final"}, "tensorboard scalar tags", tags["scalars"])
    loss = acc.Scalars("loss")
    expect([e.step for e in loss] == list(range(STEPS)), "tensorboard loss steps", [e.step for e in loss])
    expect(all(abs(e.value - want) < 1e-6 for e, want in zip(loss, LOSS)), "tensorboard loss values",
           [e.value for e in loss])
    lr = acc.Scalars("lr")
    expect(all(abs(e.value - want) < 1e-9 for e, want in zip(lr, LR)), "tensorboard lr values")
    expect(all(e.wall_time > 1.6e9 for e in loss), "tensorboard wall times")
    final = acc.Scalars("final")
    expect(len(final) == 1 and final[0].step == 0 and final[0].value == 1.0, "a value without a step (step 0)")
    # add_text
    text = acc.Tensors("note/text_summary")
    expect(len(text) == 1 and text[0].step == 10 and list(text[0].tensor_proto.string_val) == [b"hello"],
           "tensorboard text", text)
    expect("note/text_summary" in acc.PluginTagToContent("text"), "the text plugin's tag")
    # hparams: the HParams plugin's session_start_info (and session_end_info at end_training)
    content = acc.PluginTagToContent("hparams")
    expect("_hparams_/session_start_info" in content, "hparams session_start_info", list(content))
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    expect(data.version == 0 and data.WhichOneof("data") == "session_start_info", "hparams plugin data", data)
    hp = data.session_start_info.hparams
    expect(hp["lr"].number_value == 0.001, "hparam lr", hp["lr"])
    expect(hp["batch_size"].number_value == 32, "hparam batch_size")
    expect(hp["model.name"].string_value == "mlp", "hparam model.name (a nested key, flattened)")
    expect(hp["amp"].WhichOneof("kind") == "bool_value" and hp["amp"].bool_value is False, "hparam amp")
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    expect(end.session_end_info.status == 1, "hparams session_end_info STATUS_SUCCESS", end)
    # add_scalars: a run directory per member, tagged with the group's name
    for member, want in (("train", 0.5), ("val", 0.25)):
        sub = event_accumulator.EventAccumulator(os.path.join(run, f"acc_{member}"))
        sub.Reload()
        s = sub.Scalars("acc")
        expect(len(s) == 1 and s[0].step == 10 and s[0].value == want, f"add_scalars member {member}", s)


def check_mlflow(root):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="file://" + root)
    exp = client.get_experiment_by_name("demo")
    expect(exp is not None, "mlflow experiment 'demo'")
    if exp is None:
        return
    runs = client.search_runs([exp.experiment_id])
    expect(len(runs) == 1, "one mlflow run (only the main process writes)", len(runs))
    run = runs[0]
    expect(run.info.run_name == "c-run" and run.info.status == "FINISHED", "mlflow run name and status",
           (run.info.run_name, run.info.status))
    expect(run.data.params == {"lr": "0.001", "batch_size": "32", "model.name": "mlp", "amp": "False"},
           "mlflow params", run.data.params)
    hist = client.get_metric_history(run.info.run_id, "loss")
    expect([m.step for m in hist] == list(range(STEPS)), "mlflow loss steps", [m.step for m in hist])
    expect(all(abs(m.value - want) < 1e-12 for m, want in zip(hist, LOSS)), "mlflow loss values")
    expect(set(run.data.metrics) == {"loss", "lr", "final"}, "mlflow metrics (strings and groups skipped)",
           run.data.metrics)
    expect(run.data.tags.get("mlflow.runName") == "c-run" and run.data.tags.get("mlflow.source.type") == "LOCAL",
           "mlflow tags", run.data.tags)
    expect(client.get_experiment("0").name == "Default", "mlflow's Default experiment")


def check_text_files(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    expect(len(rows) == STEPS + 2, "jsonl rows", len(rows))
    expect([r["step"] for r in rows] == list(range(STEPS + 1)) + [None], "jsonl steps")
    expect(all(math.isclose(r["values"]["loss"], want) for r, want in zip(rows, LOSS)), "jsonl loss")
    expect(rows[10]["values"] == {"note": "hello", "acc": {"train": 0.5, "val": 0.25}}, "jsonl text and group",
           rows[10])
    with open(os.path.join(run, "metrics.csv"), newline="") as f:
        table = list(csv.DictReader(f))
    expect(len(table) == STEPS + 2, "csv rows", len(table))
    expect(list(table[0]) == ["step", "time", "loss", "lr", "note", "acc/train", "acc/val", "final"], "csv columns",
           list(table[0]))
    expect(float(table[3]["loss"]) == LOSS[3] and table[3]["note"] == "", "csv values", table[3])
    expect(table[10]["note"] == "hello" and table[10]["acc/val"] == "0.25", "csv text and group", table[10])
    expect(table[11]["step"] == "" and table[11]["final"] == "1", "csv row without a step", table[11])
    with open(os.path.join(run, "hparams.json")) as f:
        expect(json.load(f) == {"lr": 0.001, "batch_size": 32, "model.name": "mlp", "amp": False}, "hparams.json")


def read_wandb(run_dir):
    """The records of the run's .wandb file, as wandb's own reader scans them."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    files = [f for f in os.listdir(run_dir) if f.endswith(".wandb")]
    expect(len(files) == 1, "one .wandb file in the run folder", files)
    ds = datastore.DataStore()
    ds.open_for_scan(os.path.join(run_dir, files[0]))
    records = []
    while (data := ds.scan_data()) is not None:
        r = wandb_internal_pb2.Record()
        r.ParseFromString(data)
        records.append(r)
    ds.close()
    return files[0], records


def wandb_run(root):
    """The one offline run under root/wandb: (its folder, what wandb would upload): run, config, history rows and
    summary with every value decoded from its JSON, keys as tuples (("acc", "train") for a group's member)."""
    wandb_dir = os.path.join(root, "wandb")
    runs = sorted(os.listdir(wandb_dir)) if os.path.isdir(wandb_dir) else []
    expect(len(runs) == 1 and runs[0].startswith("offline-run-"), "one W&B offline run", runs)
    if len(runs) != 1:
        return None, None
    run_dir = os.path.join(wandb_dir, runs[0])
    name, records = read_wandb(run_dir)
    kinds = [r.WhichOneof("record_type") for r in records]
    expect([r.num for r in records] == list(range(1, len(records) + 1)), "records numbered 1, 2, ...")
    expect(kinds[:2] == ["header", "run"] and kinds[-1] == "exit" and kinds.count("run") == 1 and
           kinds.count("exit") == 1, "header, run first, exit last", kinds)

    def key(item):
        return tuple(item.nested_key) if item.nested_key else (item.key,)

    out = {"run": None, "config": {}, "history": [], "steps": [], "summary": {}, "exit": None, "records": len(records)}
    for r in records:
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out["run"] = r.run
            out["config"].update({key(i): json.loads(i.value_json) for i in r.run.config.update})
        elif kind == "config":
            out["config"].update({key(i): json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            out["history"].append({key(i): json.loads(i.value_json) for i in r.history.item})
            out["steps"].append(r.history.step.num)
        elif kind == "summary":
            out["summary"].update({key(i): json.loads(i.value_json) for i in r.summary.update})
        elif kind == "exit":
            out["exit"] = r.exit
    expect(name == f"run-{out['run'].run_id}.wandb" and runs[0].endswith("-" + out["run"].run_id),
           "the folder and file are named by the run id, as wandb names them", (runs[0], name))
    return run_dir, out


def user_values(row):
    return {k: v for k, v in row.items() if k not in (("_step",), ("_runtime",), ("_timestamp",))}


def check_wandb(root):
    """The run every tracker wrote (project demo), as wandb's reader sees it."""
    _, w = wandb_run(root)
    if w is None:
        return
    run = w["run"]
    expect(run.project == "demo" and run.display_name == "c-run" and len(run.run_id) == 8,
           "W&B run project, name and id", run)
    expect(run.start_time.seconds > 1.6e9 and run.host, "W&B start time and host")
    expect(w["config"] == {("lr",): 0.001, ("batch_size",): 32, ("model",): {"name": "mlp"}, ("amp",): False},
           "W&B config (nesting kept, as wandb.config.update)", w["config"])
    expect(w["steps"] == list(range(STEPS + 1)), "W&B history steps", w["steps"])
    expect([row[("_step",)] for row in w["history"]] == list(range(STEPS + 1)), "W&B _step of each row")
    for s in range(STEPS):
        expect(user_values(w["history"][s]) == {("loss",): LOSS[s], ("lr",): LR[s]}, f"W&B history row {s}",
               w["history"][s])
    expect(user_values(w["history"][STEPS]) == {("note",): "hello", ("acc", "train"): 0.5, ("acc", "val"): 0.25,
                                                ("final",): 1},
           "W&B row 10: text, a group, and the step-less value joining the open row (wandb's run.log)",
           w["history"][STEPS])
    expect(all(row[("_timestamp",)] > 1.6e9 and row[("_runtime",)] >= 0 for row in w["history"]),
           "W&B _timestamp and _runtime")
    expect(user_values(w["summary"]) == {("loss",): LOSS[-1], ("lr",): LR[-1], ("note",): "hello",
                                         ("acc", "train"): 0.5, ("acc", "val"): 0.25, ("final",): 1},
           "W&B summary: the last value of each key", w["summary"])
    expect(w["summary"][("_step",)] == STEPS, "W&B summary _step")
    expect(w["exit"] is not None and w["exit"].exit_code == 0, "W&B exit code 0")


def check_wandb_demo(test_trackers):
    """`test_trackers wandb`: NaN and infinities, a non-ASCII name, nested config, wandb's step rules; then
    `wandb sync --view` and `wandb beta sync --dry-run` take the run folder, with no network."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, ACC_CONFIG_FILE="none")
        p = subprocess.run([test_trackers, "wandb", d], capture_output=True, text=True, env=env, timeout=120)
        expect(p.returncode == 0, "test_trackers wandb", p.stdout + p.stderr)
        if p.returncode != 0:
            return
        expect("step 0 is below the current step 1" in p.stderr, "a step below the current one: a warning", p.stderr)
        run_dir, w = wandb_run(d)
        if w is None:
            return
        run = w["run"]
        expect(os.path.basename(run_dir).endswith("-libacc01") and run.run_id == "libacc01", "the chosen run id",
               run_dir)
        expect((run.project, run.display_name, run.entity, list(run.tags), run.notes, run.run_group, run.job_type) ==
               ("wandb-demo", "entra\u00eenement \u2713 \u8bad\u7ec3", "team", ["c", "\u00fc"], "n", "g", "train"),
               "W&B run fields", run)
        cfg = w["config"]
        expect(cfg[("seed",)] == 7 and cfg[("lr",)] == 0.001 and cfg[("layers",)] == [1, 2] and
               cfg[("opt",)] == {"name": "adamw", "betas": [0.9, 0.95]} and math.isnan(cfg[("nan",)]) and
               len(cfg) == 5, "W&B config: init's, then init_trackers' (lists, nesting and NaN kept)", cfg)
        expect(w["steps"] == [0, 1, 2, 5, 6], "W&B steps: merged, dropped and advanced as run.log", w["steps"])
        rows = [user_values(r) for r in w["history"]]
        r0 = rows[0]
        expect(math.isnan(r0[("loss",)]) and r0[("up",)] == math.inf and r0[("down",)] == -math.inf and
               r0[("ok",)] is True and r0[("none",)] is None and r0[("text",)] == "\u00e9" and len(r0) == 6,
               "W&B row 0: NaN, infinities, a boolean, null and text", r0)
        expect(rows[1] == {("loss",): 0.5, ("extra",): 2, ("a",): 1}, "W&B row 1: three logs of one step", rows[1])
        expect(rows[2] == {("b",): 2}, "W&B row 2: a step-less log", rows[2])
        expect(rows[3][("grp", "x")] == 1 and math.isnan(rows[3][("grp", "y")]) and len(rows[3]) == 2,
               "W&B row 5: a group", rows[3])
        expect(all(("late",) not in r for r in rows), "the value of a past step is not written")
        expect(rows[4] == {("long",): "x" * 70000}, "W&B row 6: a record over two blocks long (FIRST, MIDDLE, LAST)",
               len(str(rows[4])))
        summary = user_values(w["summary"])
        expect(summary[("loss",)] == 0.5 and summary[("up",)] == math.inf and summary[("b",)] == 2 and
               math.isnan(summary[("grp", "y")]) and w["summary"][("_step",)] == 6, "W&B summary",
               {k: v for k, v in summary.items() if k != ("long",)})

        # wandb's own command line reads the folder offline: no server (an unreachable base URL), a dummy key.
        wenv = dict(os.environ, WANDB_BASE_URL="http://127.0.0.1:9", WANDB_API_KEY="0" * 40, WANDB_SILENT="true",
                    WANDB_CONFIG_DIR=os.path.join(d, "cfg"), WANDB_CACHE_DIR=os.path.join(d, "cache"))
        wandb_cli = [sys.executable, "-m", "wandb"]
        p = subprocess.run([*wandb_cli, "sync", "--view", "--verbose", run_dir], capture_output=True, text=True,
                           env=wenv, cwd=d, timeout=120)
        expect(p.returncode == 0 and p.stdout.count("Record: num:") == w["records"] and
               'display_name: "entra\u00eenement \u2713 \u8bad\u7ec3"' in p.stdout,
               "`wandb sync --view` reads every record", p.stdout[-2000:] + p.stderr[-2000:])
        p = subprocess.run([*wandb_cli, "beta", "sync", "--dry-run", run_dir], capture_output=True, text=True,
                           env=wenv, cwd=d, timeout=120)
        expect(p.returncode == 0 and "Would sync 1 run(s)" in p.stdout + p.stderr and
               "run-libacc01.wandb" in p.stdout + p.stderr, "`wandb beta sync --dry-run` lists the run",
               p.stdout + p.stderr)


def check_names(test_trackers):
    """Names from the data (issue 23): every metric name and add_scalars member libacc accepts is one MLflow's
    client reads back (it validates each name it reads: mlflow.utils.validation) and one whose TensorBoard run stays
    inside the run's folder; nothing is written anywhere else."""
    from mlflow.tracking import MlflowClient
    from mlflow.utils.validation import _validate_metric_name

    rng = random.Random(23)
    pieces = ["a", "B", "0", ".", "..", "/", " ", ":", "-", "_", "\u00e9", "\u00df", "\u20ac", "\u03a9", "\t",
              "\u00a0", "\\", "*", "%"]
    names = ["..x", "...", ".", "..", "a/..x", "a/../b", "./a", "a/", "/a", "a//b", "pr\u00e9cision", "a:b c",
             "x" * 250, "x" * 251, "/../../../x"]
    names += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))) for _ in range(400)]
    names = list(dict.fromkeys(names))
    with tempfile.TemporaryDirectory() as d:
        deep = os.path.join(d, *"abcdefg")  # deeper than any name here could climb
        calls = [json.dumps({n: 1.5}) for n in names] + [json.dumps({"g": {n: 2.5}}) for n in names]
        env = dict(os.environ, ACC_CONFIG_FILE="none")
        p = subprocess.run([test_trackers, "names", deep, *calls], capture_output=True, text=True, env=env,
                           timeout=300)
        expect(p.returncode == 0, "test_trackers names", p.stderr[-2000:])
        if p.returncode != 0:
            return
        status = [int(x) for x in p.stdout.split()]
        expect(len(status) == len(calls), "a status per call", len(status))
        metrics = [n for n, st in zip(names, status) if st == 0]
        members = [n for n, st in zip(names, status[len(names):]) if st == 0]
        expect("..x" not in metrics and "a/..x" in metrics and "pr\u00e9cision" in metrics, "names refused and kept",
               metrics[:20])
        for n in metrics:
            try:
                _validate_metric_name(n)
            except Exception as e:  # noqa: BLE001 - any refusal is a failure
                expect(False, f"libacc accepted metric name {n!r}, which MLflow refuses", e)
        # Nothing outside the project folder; the run's folder holds the trackers' files and the add_scalars runs.
        here = d
        for part in [*"abcdefg"]:
            expect(os.listdir(here) == [part], f"nothing written beside {part}", os.listdir(here))
            here = os.path.join(here, part)
        expect(sorted(os.listdir(deep)) == ["acc_run_config.json", "mlruns", "names", "wandb"], "the project folder",
               sorted(os.listdir(deep)))
        run_dir = os.path.realpath(os.path.join(deep, "names"))
        for n in members:
            sub = os.path.realpath(os.path.join(run_dir, "g_" + n))
            expect(sub.startswith(run_dir + "/"), f"add_scalars run of {n!r} inside the run", sub)
            files = [f for f in os.listdir(sub) if f.startswith("events.out.tfevents.")] if os.path.isdir(sub) else []
            expect(len(files) >= 1, f"an event file for member {n!r}", sub)
        if members:
            acc = event_accumulator.EventAccumulator(os.path.join(run_dir, "g_" + members[-1]))
            acc.Reload()
            expect([e.value for e in acc.Scalars("g")][-1:] == [2.5], "TensorBoard reads an add_scalars run")
        # wandb's reader finds every accepted name (W&B keys are not paths: any name goes) with its value.
        _, w = wandb_run(deep)
        if w is not None:
            keys = set().union(*(user_values(r) for r in w["history"]))
            expect(keys == {(n,) for n in metrics} | {("g", n) for n in members}, "W&B reads every accepted name",
                   keys ^ ({(n,) for n in metrics} | {("g", n) for n in members}))
        # MLflow's client reads the run back: every accepted name, each with its value.
        client = MlflowClient(tracking_uri="file://" + os.path.join(deep, "mlruns"))
        exp = client.get_experiment_by_name("names")
        runs = client.search_runs([exp.experiment_id]) if exp else []
        expect(len(runs) == 1, "the names run read back by MLflow", len(runs))
        if runs:
            expect(set(runs[0].data.metrics) == set(metrics), "MLflow reads every accepted metric",
                   set(metrics) ^ set(runs[0].data.metrics))
            for n in metrics[:50]:
                hist = client.get_metric_history(runs[0].info.run_id, n)
                expect([m.value for m in hist] == [1.5], f"MLflow's history of {n!r}", hist)


def main():
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, ACC_CONFIG_FILE="none")
        p = subprocess.run([sys.argv[1], "run", d], capture_output=True, text=True, env=env, timeout=120)
        expect(p.returncode == 0, "test_trackers run", p.stdout + p.stderr)
        if p.returncode != 0:
            return
        check_tensorboard(os.path.join(d, "demo"))
        check_mlflow(os.path.join(d, "mlruns"))
        check_text_files(os.path.join(d, "demo"))
        check_wandb(d)
    check_wandb_demo(sys.argv[1])
    check_names(sys.argv[1])


main()
finish()
