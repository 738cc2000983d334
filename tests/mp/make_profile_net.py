#!/usr/bin/env python3
"""Writes tests/mp/fixtures/profile_net.pt: a TorchScript module with a submodule, for mp-profile's check that
with_stack and with_modules give TorchScript's call stack and module hierarchy in the trace. Run with
bench/setup.sh's environment: .venv-bench/bin/python tests/mp/make_profile_net.py"""
import os

import torch


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.out = torch.nn.Linear(4, 1)

    def forward(self, input):
        return self.out(self.inner(input))


torch.manual_seed(0)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "profile_net.pt")
torch.jit.script(Net()).save(path)
print("wrote", path)
