#include "train/param_groups.hpp"

#include <algorithm>
#include <cctype>

#include "util/pattern.hpp"

namespace acc::core {

namespace {

bool is_layer_norm(const std::string& class_name) {
  return class_name == "LayerNorm" || class_name == "torch::nn::LayerNormImpl";
}

// Trainer's forbidden_name_patterns, searched in the lower-cased name.
bool name_exempt(std::string name) {
  static const Pattern patterns(R"(bias|layernorm|rmsnorm|(^|\.)norm($|\.)|_norm($|\.))", "forbidden_name_patterns");
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return patterns.search(name);
}

void collect(const ModuleTree& tree, int index, const std::string& prefix, bool under_norm,
             std::vector<std::string>& out) {
  const ModuleTree::Module& m = tree.modules[static_cast<size_t>(index)];
  under_norm = under_norm || is_layer_norm(m.class_name);
  for (const auto& [name, child] : m.children) collect(tree, child, prefix + name + ".", under_norm, out);
  for (const auto& [name, tensor] : m.parameters) {
    (void)tensor;
    if (under_norm || name_exempt(prefix + name)) out.push_back(prefix + name);
  }
}

}  // namespace

std::vector<std::string> no_decay_parameter_names(const ModuleTree& tree) {
  std::vector<std::string> out;
  if (!tree.modules.empty()) collect(tree, 0, "", false, out);
  return out;
}

}  // namespace acc::core
