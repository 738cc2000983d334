#!/usr/bin/env python3
"""Checkpoints across process meshes (issue 27 item 6), with real processes started by `acc launch` from Accelerate
config files (tests/mp/mp_mesh_checkpoint.cpp drives each run: the Llama fixture, AdamW, a shuffled loader whose
global batch is 4 sequences on every mesh, 16 steps = 1 1/3 epochs):

- save_state under tp=2 x dp_shard=2 (FSDP2), load_state under dp_shard=4, then on one process, then back under
  tp=2 x dp_shard=2, 4 steps each: every step's loss and the final parameters within 1e-5 of the uninterrupted run
  (AdamW's moments and step counts survive each move: without them the loss parts at once), with whole tensors
  (FULL_STATE_DICT) and with every process's slices (SHARDED_STATE_DICT, the tensor-parallel ones in their parts'
  coordinates); the same without tensor parallelism (dp_shard=4 -> one process -> dp_replicate=2 x dp_shard=2);
- the same for GPT-2 (packed q/k/v, a tied head) with SHARDED_STATE_DICT, and from dp_replicate=2 x dp_shard=2 x tp=2
  (8 processes) into tp=2 x dp_shard=2;
- under the same mesh the resumed run is the uninterrupted one bit for bit;
- save_pretrained under tp=2 x dp_shard=2 writes the files one process writes for the same checkpoint, byte for byte,
  and transformers loads them with libacc's logits (tests/hf/check_saved.py --saved, where the bench environment is);
- a loader's position moves between meshes as the samples taken: with another global batch that divides them it
  continues at the same sample of the same order, otherwise its pass starts again and the note says so;
- a SHARDED checkpoint whose tensor-parallel parts do not fit together is refused naming the file and both meshes.

Usage: mesh_checkpoint_test.py ACC WORKER FIXTURES BENCH_PYTHON   (FIXTURES: tests/hf/fixtures)
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_f32 import max_abs_diff, read_safetensors  # noqa: E402
import checks  # noqa: E402
from checks import expect, finish  # noqa: E402
import mp_test  # noqa: E402  (its launch(): this script's arguments start with ACC and WORKER as mp_test.py's do)

FIXTURES, BENCH_PYTHON = sys.argv[3:5]
HERE = os.path.dirname(os.path.abspath(__file__))


def fsdp2(state_dict, **sizes):
    body = ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
            f"  fsdp_state_dict_type: {state_dict}\nparallelism_config:\n")
    return body + "".join(f"  parallelism_config_{k}_size: {v}\n" for k, v in sizes.items())


def pipeline_env(**sizes):
    """pp=2 (2 micro-batches) under DDP with the other sizes, as the variables accelerate launch exports (a config
    file's parallelism_config needs FSDP2)."""
    env = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_PP_SIZE": "2",
           "PARALLELISM_CONFIG_PP_MICROBATCHES": "2"}
    return dict(env, **{f"PARALLELISM_CONFIG_{k.upper()}_SIZE": str(v) for k, v in sizes.items()})


# name: (processes, config file body for a state dict type (None: none), [the variables instead])
MESHES = {
    "pp2": (2, None, pipeline_env()),
    "pp2_dp2": (4, lambda sd: fsdp2(sd, dp_shard=2) + "  parallelism_config_pp_size: 2\n"
                "  parallelism_config_pp_microbatches: 2\n"),
    "pp2_tp2": (4, None, pipeline_env(tp=2)),
    "sp2_dp2": (4, lambda sd: fsdp2(sd, dp_shard=2, sp=2)),
    "tp2_dp2": (4, lambda sd: fsdp2(sd, dp_shard=2, tp=2)),
    "dp4": (4, lambda sd: fsdp2(sd, dp_shard=4)),
    "hsdp": (4, lambda sd: fsdp2(sd, dp_replicate=2, dp_shard=2)),
    "hsdp_tp2": (8, lambda sd: fsdp2(sd, dp_replicate=2, dp_shard=2, tp=2)),
    "one": (1, None),
}


def add_tensor(checkpoint, file, name, values):
    """Adds a float32 tensor to a safetensors file of a checkpoint, and its new size to the manifest."""
    path = os.path.join(checkpoint, file)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header[name] = {"dtype": "F32", "shape": [len(values)], "data_offsets": [len(data), len(data) + 4 * len(values)]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data + struct.pack(f"<{len(values)}f", *values))
    with open(os.path.join(checkpoint, "manifest.json")) as f:
        manifest = json.load(f)
    manifest["files"][file] = os.path.getsize(path)
    with open(os.path.join(checkpoint, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def run(mesh, steps, load="-", save="-", out="-", state_dict="FULL_STATE_DICT", global_batch=4, model="llama"):
    """One run; returns (process, {step: loss})."""
    n, config, *env = MESHES[mesh]
    p, _ = mp_test.launch(n, FIXTURES, steps, load, save, out, config=config(state_dict) if config else None,
                          env_extra=dict(*env, MP_GLOBAL_BATCH=str(global_batch), MP_MODEL=model))
    losses = {int(s): float(v) for s, v in re.findall(r"^LOSS (\d+) (\S+)$", p.stdout, re.M)}
    return p, losses


def samples(p):
    """{step: the dataset indices its global batch took}."""
    return {int(s): list(map(int, v.split())) for s, v in re.findall(r"^SAMPLES (\d+) (.*)$", p.stdout, re.M)}


def weights(out):
    path = os.path.join(out, "model.safetensors")
    return read_safetensors(path) if os.path.exists(path) else None


def close(got, want, what, tol=1e-5):
    """Every step's loss of `got` within tol (relative) of `want`'s."""
    steps = sorted(got)
    worst = max((abs(got[s] - want[s]) / abs(want[s]) for s in steps if s in want), default=float("inf"))
    expect(steps and all(s in want for s in steps) and worst <= tol, f"{what}: losses of steps {steps} within {tol}",
           f"worst relative difference {worst:.3g}\n{got}\n{want}")
    return worst


def chain(d, label, meshes, state_dict, want_losses, want_weights, model="llama"):
    """4 steps on each mesh in turn, each loading the previous one's checkpoint; returns the first checkpoint."""
    load, losses, first = "-", {}, None
    for i, mesh in enumerate(meshes):
        save = os.path.join(d, f"{label}-{i}-{mesh}")
        out = os.path.join(d, f"{label}-out") if i == len(meshes) - 1 else "-"
        p, got = run(mesh, 4 * (i + 1), load, save, out, state_dict, model=model)
        expect(p.returncode == 0 and sorted(got) == list(range(4 * i, 4 * i + 4)),
               f"{label}: steps {4 * i}-{4 * i + 3} on {mesh} (loading {os.path.basename(load)})", p.stdout + p.stderr)
        if p.returncode != 0:
            return first
        if i > 0 and meshes[i - 1] != mesh:
            expect("this run is" in p.stderr, f"{label}: loading onto {mesh} says which meshes it moved between",
                   p.stderr)
        losses.update(got)
        load, first = save, first or save
    worst = close(losses, want_losses, label)
    if want_weights is None:
        print(f"{label}: {' -> '.join(meshes)}: losses within {worst:.3g} (relative)")
        return first
    w = weights(os.path.join(d, f"{label}-out"))
    if model == "gpt2" and w is not None:
        # The attention's key bias (c_attn.bias[n_embd:2 n_embd]) shifts every score of a query alike, so softmax
        # ignores it: its gradient is rounding noise, which AdamW turns into lr-sized steps of either sign (another
        # reduction order, as dp_shard=4's, moves it by 1e-3 in uninterrupted runs too). Everything else is compared.
        w, want_weights = ({k: v[:32] + v[64:] if k.endswith("attn.c_attn.bias") else v for k, v in x.items()}
                           for x in (w, want_weights))
    diff = max_abs_diff(w, want_weights) if w is not None else float("inf")
    expect(diff <= 1e-5, f"{label}: the parameters after 16 steps within 1e-5 of the uninterrupted run's", str(diff))
    print(f"{label}: {' -> '.join(meshes)}: losses within {worst:.3g} (relative), parameters within {diff:.3g}")
    return first


def main():
    with tempfile.TemporaryDirectory() as d:
        # The uninterrupted runs: one process, and tp=2 x dp_shard=2 (item 5's equivalence, the baseline here).
        ref_out, tp_out = os.path.join(d, "ref-out"), os.path.join(d, "tp-out")
        p_ref, ref = run("one", 16, out=ref_out)
        p = p_ref
        expect(p.returncode == 0 and len(ref) == 16, "16 steps on one process", p.stdout + p.stderr)
        p, tp_ref = run("tp2_dp2", 16, out=tp_out)
        expect(p.returncode == 0 and len(tp_ref) == 16, "16 steps under tp=2 x dp_shard=2", p.stdout + p.stderr)
        if checks.failed:
            return
        ref_w, tp_w = weights(ref_out), weights(tp_out)
        close(tp_ref, ref, "tp=2 x dp_shard=2 uninterrupted against one process")
        expect(max_abs_diff(tp_w, ref_w) <= 1e-5, "tp=2 x dp_shard=2 uninterrupted: parameters within 1e-5 of one "
               "process's", str(max_abs_diff(tp_w, ref_w)))
        expect(abs(ref[15] - ref[0]) > 1e-3, "training moves the loss", f"{ref[0]} -> {ref[15]}")

        # Without tensor parallelism: dp_shard=4 -> one process -> dp_replicate=2 x dp_shard=2.
        for sd in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
            chain(d, f"dp-{sd}", ["dp4", "one", "hsdp", "hsdp"], sd, ref, ref_w)
        # A loader's position is the samples taken: loaded with another global batch that divides them, it continues
        # at the same sample of the same order; with one that does not, it starts that pass again (and says so).
        order = [i for s in range(12) for i in samples(p_ref).get(s, [])]  # the first pass's order (48 samples)
        expect(sorted(order) == list(range(48)), "one pass takes every sample once", str(order))
        c4 = os.path.join(d, "dp-FULL_STATE_DICT-0-dp4")  # 4 steps of 4 under dp_shard=4: 16 samples taken
        for mesh in ("dp4", "one"):
            p, _ = run(mesh, 6, c4, global_batch=8)
            got = samples(p)
            expect(p.returncode == 0 and sorted(got) == [4, 5] and got[4] + got[5] == order[16:32],
                   f"a checkpoint of 16 samples (dp_shard=4) loaded on {mesh} with a global batch of 8: the next two "
                   "steps take samples 16-31 of the same order", f"{got}\n{order}\n{p.stderr}")
        p, _ = run("one", 6, c4, global_batch=3)
        got = samples(p)
        expect(p.returncode == 0 and sorted(got) == [4, 5] and got[4] + got[5] == order[0:6] and
               "dataloader.json (4 steps of 4 samples; this run's steps take 3)" in p.stderr,
               "with a global batch of 3 (which does not divide 16) the pass starts again, and the note says why",
               f"{got}\n{order}\n{p.stderr}")

        # With it: tp=2 x dp_shard=2 -> dp_shard=4 -> one process -> tp=2 x dp_shard=2.
        first = {}
        for sd in ("FULL_STATE_DICT", "SHARDED_STATE_DICT"):
            first[sd] = chain(d, f"tp-{sd}", ["tp2_dp2", "dp4", "one", "tp2_dp2"], sd, tp_ref, tp_w)
        # Three dimensions: dp_replicate=2 x dp_shard=2 x tp=2 (8 processes; the replicas write the same slices)
        # into tp=2 x dp_shard=2.
        chain(d, "hsdp_tp-SHARDED_STATE_DICT", ["hsdp_tp2", "tp2_dp2"], "SHARDED_STATE_DICT",
              {s: v for s, v in tp_ref.items() if s < 8}, None)
        # GPT-2: c_attn packs q, k and v (each rank's part holds a slice of each), the head is the embedding.
        gpt2_out = os.path.join(d, "gpt2-out")
        p, gpt2_ref = run("tp2_dp2", 16, out=gpt2_out, model="gpt2")
        expect(p.returncode == 0 and len(gpt2_ref) == 16, "GPT-2: 16 steps under tp=2 x dp_shard=2", p.stdout + p.stderr)
        if p.returncode == 0:
            chain(d, "gpt2-SHARDED_STATE_DICT", ["tp2_dp2", "dp4", "one", "tp2_dp2"], "SHARDED_STATE_DICT", gpt2_ref,
                  weights(gpt2_out), model="gpt2")
        names = sorted(os.listdir(first["SHARDED_STATE_DICT"])) if first["SHARDED_STATE_DICT"] else []
        expect([x for x in names if x.startswith("model_slices_0.rank")] ==
               [f"model_slices_0.rank{r}.{e}" for r in range(4) for e in ("json", "safetensors")]
               and "model.safetensors" not in names,
               "SHARDED_STATE_DICT under tp=2 x dp_shard=2: one slice file per process, no whole model", str(names))

        # Pipeline (issue 40 item 6): the checkpoint holds the whole model and its optimizer state by the whole model's
        # parameters, so pp=2 -> one process -> pp=2 x dp_shard=2 -> dp_shard=4, and Ulysses (sp: whole weights)
        # sp=2 x dp_shard=2 -> pp=2 x tp=2 -> sp=2 x dp_shard=2 -> one process, each within 1e-5 of one process's run.
        pp_first = chain(d, "pp", ["pp2", "one", "pp2_dp2", "dp4"], "FULL_STATE_DICT", ref, ref_w)
        chain(d, "sp", ["sp2_dp2", "pp2_tp2", "sp2_dp2", "one"], "FULL_STATE_DICT", ref, ref_w)
        if pp_first:
            with open(os.path.join(pp_first, "accelerator_state.json")) as f:
                mesh = json.load(f)["mesh"]
            expect(mesh["pp"] == 2 and mesh["sp"] == 1 and mesh["dp_shard"] == 1,
                   "accelerator_state.json records the pipeline's mesh", str(mesh))
            p, pp_ref = run("pp2", 16, out=os.path.join(d, "pp-full"))
            out = os.path.join(d, "pp-resumed")
            p, got = run("pp2", 16, pp_first, "-", out)
            expect(p.returncode == 0 and got == {s: pp_ref[s] for s in range(4, 16)},
                   "pp=2 resumed under the same mesh: every loss equal to the uninterrupted pp=2 run's",
                   p.stdout + p.stderr)
            full, resumed = weights(os.path.join(d, "pp-full")), weights(out)
            expect(full is not None and resumed is not None and max_abs_diff(full, resumed) == 0,
                   "pp=2 resumed under the same mesh: the parameters equal bit for bit")
            # A tensor no stage holds (a checkpoint of another model) is refused by name when a pipeline loads it.
            other = os.path.join(d, "pp-other-model")
            shutil.copytree(pp_first, other)
            add_tensor(other, "model.safetensors", "model.extra.weight", [1.0, 2.0])
            p, _ = run("pp2", 5, other)
            expect(p.returncode != 0 and "'model.extra.weight' is not a tensor of the model (no stage holds it)" in
                   p.stderr, "a checkpoint tensor no stage holds refused by name under pp=2", p.stdout + p.stderr)
            # SHARDED_STATE_DICT under a pipeline is refused by name (its checkpoint is the whole model's).
            p, _ = run("pp2_dp2", 4, "-", os.path.join(d, "pp-sharded"), "-", "SHARDED_STATE_DICT")
            expect(p.returncode != 0 and "SHARDED_STATE_DICT is not supported with parallelism_config.pp_size" in
                   p.stderr, "SHARDED_STATE_DICT with pp refused by name", p.stdout + p.stderr)

        # The same mesh: the resumed run is the uninterrupted one, bit for bit.
        for sd, c1 in first.items():
            if not c1:
                continue
            out = os.path.join(d, f"same-{sd}")
            p, got = run("tp2_dp2", 16, c1, "-", out, sd)
            expect(p.returncode == 0 and got == {s: tp_ref[s] for s in range(4, 16)},
                   f"{sd}: tp=2 x dp_shard=2 resumed under the same mesh: every loss equal", p.stdout + p.stderr)
            w = weights(out)
            expect(w is not None and max_abs_diff(w, tp_w) == 0,
                   f"{sd}: tp=2 x dp_shard=2 resumed under the same mesh: the parameters equal bit for bit")

        # save_pretrained under tp=2 x dp_shard=2 against one process's, from the same checkpoint.
        c1 = first["FULL_STATE_DICT"]
        if c1:
            outs = {}
            for mesh in ("tp2_dp2", "one"):
                outs[mesh] = os.path.join(d, f"pretrained-{mesh}")
                p, _ = run(mesh, 4, c1, "-", outs[mesh])
                expect(p.returncode == 0, f"save_pretrained on {mesh}", p.stdout + p.stderr)
            files = sorted(os.listdir(outs["one"])) if os.path.isdir(outs["one"]) else []
            expect(files and sorted(os.listdir(outs["tp2_dp2"])) == files, "save_pretrained: the same files",
                   f"{files}")
            for f in files:
                if f == "libacc_outputs.safetensors":
                    continue
                same = open(os.path.join(outs["one"], f), "rb").read() == open(os.path.join(outs["tp2_dp2"], f),
                                                                               "rb").read()
                expect(same, f"save_pretrained under tp=2 x dp_shard=2: {f} equals one process's byte for byte")
            # transformers loads what tp=2 x dp_shard=2 saved, with the logits the split model computed.
            if os.path.exists(BENCH_PYTHON):
                p = subprocess.run([BENCH_PYTHON, os.path.join(HERE, "..", "hf", "check_saved.py"), "--saved",
                                    outs["tp2_dp2"]], capture_output=True, text=True, timeout=300)
                print(p.stdout.strip())
                expect(p.returncode == 0, "transformers loads save_pretrained's files of tp=2 x dp_shard=2 with the "
                       "split model's logits", p.stdout + p.stderr)
            else:
                print(f"transformers check skipped: no {BENCH_PYTHON} (bench/setup.sh)")

        # Bad input: a SHARDED checkpoint whose tensor-parallel parts do not fit together (one file says the tensor
        # is split in 4, the others in 2) is refused, naming the file and both meshes.
        c1 = first["SHARDED_STATE_DICT"]
        if c1:
            bad = os.path.join(d, "bad")
            shutil.copytree(c1, bad)
            side = os.path.join(bad, "model_slices_0.rank1.json")
            text = open(side).read()
            changed = re.sub(r'("tp":\s*\{[^}]*"size":\s*)2', r"\g<1>4", text, count=1)
            expect(changed != text, "the slice file names its tensor-parallel parts", text[:400])
            with open(side, "w") as f:
                f.write(changed)  # the same length: the manifest still holds
            p, _ = run("dp4", 8, bad, "-", "-", "SHARDED_STATE_DICT")
            err = p.stdout + p.stderr
            expect(p.returncode != 0 and side in err and "dp_shard=2 x tp=2" in err and "this run is dp_shard=4" in err,
                   "a SHARDED checkpoint whose parts do not fit is refused naming the file and both meshes", err)
            print("refused:", next((l for l in err.splitlines() if l.startswith("mp_mesh_checkpoint:")), err[-300:]))


if __name__ == "__main__":
    main()
    finish()
