#include "models/module_tree.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <stdexcept>

#include "models/model.hpp"

namespace acc::core {

namespace {

ModuleTree::Tensor tensor_of(const at::Tensor& t) {
  return {t.numel(), static_cast<int>(t.element_size()), !at::isFloatingType(t.scalar_type())};
}

int add_module(ModuleTree& tree, const torch::nn::Module& m) {
  const int index = static_cast<int>(tree.modules.size());
  tree.modules.push_back({m.name(), {}, {}, {}});
  for (const auto& p : m.named_parameters(/*recurse=*/false)) tree.modules[index].parameters.emplace_back(p.key(), tensor_of(p.value()));
  for (const auto& b : m.named_buffers(/*recurse=*/false)) tree.modules[index].buffers.emplace_back(b.key(), tensor_of(b.value()));
  for (const auto& c : m.named_children()) {
    const int child = add_module(tree, *c.value());
    tree.modules[index].children.emplace_back(c.key(), child);
  }
  return index;
}

}  // namespace

ModuleTree tree_of(const Model& model) {
  const auto* nn = dynamic_cast<const NnModel*>(&model);
  if (!nn) throw std::invalid_argument("device maps need a model with a module tree (a TorchScript module has none)");
  ModuleTree tree;
  add_module(tree, *nn->module());
  if (const std::string embedding = model.tied_lm_head(); !embedding.empty()) {
    // transformers' tied head: a module of its own whose weight is the input embedding.
    ModuleTree::Tensor weight;
    for (const auto& [name, t] : model.named_parameters())
      if (name == embedding) weight = tensor_of(t);
    tree.modules.push_back({"Linear", {}, {{"weight", weight}}, {}});
    tree.modules[0].children.emplace_back("lm_head", static_cast<int>(tree.modules.size()) - 1);
    tree.tied.push_back({"lm_head.weight", embedding});
  }
  return tree;
}

}  // namespace acc::core
