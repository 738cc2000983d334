// Precompiled header for libacc's LibTorch translation units: parsing ATen costs ~10 s per unit on 2 cores.
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <string>
#include <vector>
#include <memory>
#include <stdexcept>
#include <c10/core/GradMode.h>
