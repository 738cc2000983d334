// What the module trees of the built-in and Hugging Face families share: modules that know how they were
// initialised (so a tree built on the meta device can be materialised and initialised later), and
// torch.nn.ModuleList's naming.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

namespace acc::core {

// A module with parameters that knows how it was initialised. Its tensors are read through param() rather
// than kept in members: materialising replaces them.
struct InitModule : torch::nn::Module {
  using torch::nn::Module::Module;  // Module(name): the class name nn.Module would show ("LayerNorm")
  virtual void reset() = 0;
  at::Tensor& param(const char* name) { return parameters_[name]; }
  at::Tensor bias_or_none() {
    const at::Tensor* b = parameters_.find("bias");
    return b ? *b : at::Tensor();
  }
  // Gives each of this module's meta tensors the tensor `source(local_name, meta_tensor)` returns (a checkpoint's).
  template <class F>
  void adopt(F&& source) {
    for (auto& item : parameters_)
      if (item.value().is_meta()) item.value() = source(item.key(), item.value()).requires_grad_(true);
  }
  // torch's to_empty for this module's own tensors: meta ones get uninitialised storage on `device`.
  void materialize(c10::Device device) {
    for (auto& item : parameters_)
      if (item.value().is_meta())
        item.value() = at::empty(item.value().sizes(), item.value().options().device(device)).requires_grad_(true);
  }
};

// A list of submodules named "0", "1", ... (torch.nn.ModuleList).
template <class M>
struct ModuleList : torch::nn::Module {
  std::shared_ptr<M> add(std::shared_ptr<M> m) {
    items.push_back(register_module(std::to_string(items.size()), std::move(m)));
    return items.back();
  }
  std::vector<std::shared_ptr<M>> items;
};

// Initialises every InitModule of the tree in definition order: the same draws from the generator as at
// construction, whatever device the tree is on now.
inline void reset_tree(torch::nn::Module& root) {
  c10::NoGradGuard no_grad;
  for (const auto& m : root.modules(/*include_self=*/true))
    if (auto* init = dynamic_cast<InitModule*>(m.get())) init->reset();
}

inline void materialize_tree(torch::nn::Module& root, c10::Device device) {
  for (const auto& m : root.modules(/*include_self=*/true))
    if (auto* init = dynamic_cast<InitModule*>(m.get())) init->materialize(device);
}

}  // namespace acc::core
