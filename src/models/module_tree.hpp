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
  // The index of the module at dotted `name` ("" the root), -1 where no module has that name (a tensor's).
  int module_at(const std::string& name) const;
};

// A module of transformers' model that libacc's leaves out because it holds no weights (rotary embeddings,
// dropout, activations), so that module trees, and the device maps planned over them, list it as Accelerate's do.
// `buffers` are the non-persistent ones transformers gives it (LlamaRotaryEmbedding's inv_freq): Accelerate counts
// them, checkpoints and state dicts do not hold them. A `name` the model has just gets these buffers.
struct WeightlessModule {
  std::string name;        // dotted: "model.rotary_emb"
  std::string class_name;  // "LlamaRotaryEmbedding"
  std::string before;  // the sibling it precedes in named_children ("h" for GPT-2's "transformer.drop"); "": last
  std::vector<std::pair<std::string, ModuleTree::Tensor>> buffers;
};

// The tree as transformers shows it: a tied output embedding appears as its own module ("lm_head" with a
// "weight" tied to the input embedding's; Model::tied_lm_head), as nn.Module trees do. std::invalid_argument for
// a model without a module tree (TorchScript). With `weightless`, the model's weightless_modules() are in it, in
// transformers' order; FSDP's wrap policies, which wrap parameters, leave them out.
ModuleTree tree_of(const Model& model, bool weightless = true);

}  // namespace acc::core
