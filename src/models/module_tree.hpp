// A model's module tree as nn.Module sees it, torch-free: what device maps (bigmodel/) and FSDP's wrap policies
// (parallel/sharded.cpp) are planned over, for a libacc model and, in the tests, for a tree recorded from PyTorch.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace acc::core {

class Model;

// A module tree as nn.Module sees it: per module its class name and, in registration order, its direct
// parameters, children and buffers (named_parameters / named_children / named_buffers with recurse=False).
struct ModuleTree {
  struct Tensor {
    int64_t numel = 0;
    int element_size = 4;  // bytes
    bool integer = false;  // integer and bool tensors keep their dtype when a model is converted
  };
  struct Module {
    std::string class_name;
    std::vector<std::pair<std::string, int>> children;        // local name -> module index
    std::vector<std::pair<std::string, Tensor>> parameters;   // local name -> tensor
    std::vector<std::pair<std::string, Tensor>> buffers;
  };
  std::vector<Module> modules;                  // modules[0] is the root
  std::vector<std::vector<std::string>> tied;   // groups of parameter names that are one tensor
};

// The tree as transformers shows it: a tied output embedding appears as its own module ("lm_head" with a
// "weight" tied to the input embedding's; Model::tied_lm_head), as nn.Module trees do. std::invalid_argument for
// a model without a module tree (TorchScript).
ModuleTree tree_of(const Model& model);

}  // namespace acc::core
