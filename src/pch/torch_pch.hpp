// Precompiled header for libacc's LibTorch translation units: parsing ATen costs ~10 s per unit on 2 cores.
// (No #pragma once: the compiler reads a precompiled header as a main file, and warns about it there.)
#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <string>
#include <vector>
#include <memory>
#include <stdexcept>
#include <c10/core/GradMode.h>
