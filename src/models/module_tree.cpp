#include "models/module_tree.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "models/model.hpp"

namespace acc::core {

namespace {

ModuleTree::Tensor tensor_of(const at::Tensor& t) {
  return {t.numel(), static_cast<int>(t.element_size()), !at::isFloatingType(t.scalar_type())};
}

int add_module(ModuleTree& tree, const torch::nn::Module& m) {
  const int index = static_cast<int>(tree.modules.size());
  tree.modules.push_back({m.name(), {}, {}, {}});
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    tree.modules[index].parameters.emplace_back(p.key(), tensor_of(p.value()));
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    tree.modules[index].buffers.emplace_back(b.key(), tensor_of(b.value()));
  for (const auto& c : m.named_children()) {
    const int child = add_module(tree, *c.value());
    tree.modules[index].children.emplace_back(c.key(), child);
  }
  return index;
}

// Each module goes under its parent, before its named sibling; a model's own wrong list is a logic_error.
void add_weightless(ModuleTree& tree, const std::vector<WeightlessModule>& extra) {
  const auto find = [&](int m, const std::string& local) {
    auto& kids = tree.modules[static_cast<size_t>(m)].children;
    return std::find_if(kids.begin(), kids.end(), [&](const auto& c) { return c.first == local; });
  };
  for (const WeightlessModule& w : extra) {
    int parent = 0;
    std::string rest = w.name;
    for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
      const auto it = find(parent, rest.substr(0, dot));
      if (it == tree.modules[static_cast<size_t>(parent)].children.end())
        throw std::logic_error("weightless module '" + w.name + "': no parent module");
      parent = it->second;
    }
    int index;
    if (const auto it = find(parent, rest); it != tree.modules[static_cast<size_t>(parent)].children.end()) {
      index = it->second;
    } else {
      index = static_cast<int>(tree.modules.size());
      tree.modules.push_back({w.class_name, {}, {}, {}});
      auto& kids = tree.modules[static_cast<size_t>(parent)].children;
      auto at = w.before.empty() ? kids.end() : find(parent, w.before);
      if (!w.before.empty() && at == kids.end())
        throw std::logic_error("weightless module '" + w.name + "': no sibling '" + w.before + "'");
      kids.emplace(at, rest, index);
    }
    auto& buffers = tree.modules[static_cast<size_t>(index)].buffers;
    buffers.insert(buffers.end(), w.buffers.begin(), w.buffers.end());
  }
}

}  // namespace

int ModuleTree::module_at(const std::string& name) const {
  int m = 0;
  for (size_t start = 0; !name.empty() && start <= name.size();) {
    const size_t dot = std::min(name.find('.', start), name.size());
    const std::string_view part = std::string_view(name).substr(start, dot - start);
    const auto& kids = modules[static_cast<size_t>(m)].children;
    const auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& c) { return c.first == part; });
    if (it == kids.end()) return -1;
    m = it->second;
    start = dot + 1;
  }
  return m;
}

ModuleTree tree_of(const Model& model, bool weightless) {
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
  if (weightless) add_weightless(tree, model.weightless_modules());
  return tree;
}

}  // namespace acc::core
