"""Record Accelerate's prepare_pippy(split_points="auto") split points for libacc's test of its port
(tests/cpp/test_device_map.cpp, DeviceMap.PippySplitPointsAreAccelerates).

What it makes
    tests/bigmodel/fixtures/pippy_split_points.json: for models of make_device_map_fixtures.py (built empty, as there)
    and 2, 3 and 4 processes, the split points prepare_pippy computes: generate_device_map(model, n,
    no_split_module_classes) and, for each device i >= 1, the first module the map puts on it. With
    no_split_module_classes None (Accelerate's default) and the model's _no_split_modules (libacc's default).

How to run it
    /work/main/.venv-bench/bin/python tests/bigmodel/make_pippy_fixtures.py

CI never runs this script; its output is committed.
"""
import json
import os

from accelerate.inference import generate_device_map

from make_device_map_fixtures import build_model

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "pippy_split_points.json")
MODELS = ["llama_small", "mistral_small", "qwen2_tied", "gpt2_124m"]


def main():
    cases = []
    for name in MODELS:
        model, _ = build_model(name)
        for n in (2, 3, 4):
            for no_split in (None, list(model._no_split_modules)):
                case = {"model": name, "num_processes": n, "no_split_module_classes": no_split}
                try:
                    device_map = generate_device_map(model, n, no_split_module_classes=no_split)
                    # prepare_pippy's own loop
                    case["split_points"] = [next(k for k, v in device_map.items() if v == i) for i in range(1, n)]
                except StopIteration:
                    case["error"] = "a device takes no module"
                cases.append(case)
    with open(OUT, "w") as f:
        json.dump({"cases": cases}, f, indent=1)
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
