#!/usr/bin/env python3
"""Writes tests/cpp/profile_schedules.json: torch.profiler.schedule's action at every step for a set of schedules,
from torch itself, for test_profiler (libacc's ProfileSchedule must give the same). Run with bench/setup.sh's
environment: .venv-bench/bin/python tests/cpp/make_profile_schedules.py"""
import json
import os
import warnings

import torch
from torch.profiler import schedule

SCHEDULES = [
    {"wait": 1, "warmup": 1, "active": 2, "repeat": 1, "skip_first": 1},
    {"wait": 1, "warmup": 1, "active": 1, "repeat": 2},
    {"wait": 0, "warmup": 0, "active": 1},
    {"wait": 2, "warmup": 0, "active": 3, "repeat": 0, "skip_first": 0},
    {"wait": 3, "warmup": 1, "active": 1, "repeat": 1, "skip_first": 2, "skip_first_wait": 1},
    {"wait": 5, "warmup": 2, "active": 2, "repeat": 3, "skip_first": 10, "skip_first_wait": 1},
    {"wait": 0, "warmup": 2, "active": 4, "repeat": 2, "skip_first": 3},
]
STEPS = 40

out = {"torch": torch.__version__, "steps": STEPS, "schedules": []}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # warmup 0 warns
    for s in SCHEDULES:
        fn = schedule(**s)
        out["schedules"].append({"schedule": s, "actions": [fn(i).name for i in range(STEPS)]})
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile_schedules.json")
with open(path, "w") as f:  # one schedule a line
    f.write('{"torch": %s, "steps": %d, "schedules": [\n' % (json.dumps(out["torch"]), STEPS))
    f.write(",\n".join(json.dumps(s) for s in out["schedules"]))
    f.write("\n]}\n")
print("wrote", path)
