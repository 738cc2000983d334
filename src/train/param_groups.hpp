// Parameter groups of an optimizer: which parameters transformers' Trainer exempts from weight decay.
#pragma once
#include <string>
#include <vector>

#include "models/module_tree.hpp"

namespace acc::core {

// The complement of Trainer.get_decay_parameter_names (transformers/trainer.py, get_parameter_names in
// trainer_pt_utils.py): a parameter gets no weight decay when a module above it, or its own, is a LayerNorm
// (nn.LayerNorm; a C++ user's torch::nn::LayerNorm), or when its lower-cased full name contains "bias", "layernorm"
// or "rmsnorm", a segment "norm" or one ending in "_norm" (RMSNorm layers are found by their names only, as there).
// In the tree's order, children before a module's own parameters; a tied parameter under each of its names.
std::vector<std::string> no_decay_parameter_names(const ModuleTree& tree);

}  // namespace acc::core
