// Device maps for libacc's models: the module tree of a model (torch::nn::Module trees: the built-in and
// Hugging Face families and a C++ user's modules) and Accelerate's device_map values ("auto", "balanced",
// "balanced_low_0", "sequential") planned over it with bigmodel/device_map.hpp.
#pragma once
#include <string>

#include "bigmodel/device_map.hpp"
#include "models/model.hpp"

namespace acc::core::bigmodel {

// The tree as transformers shows it: a tied output embedding appears as its own module ("lm_head" with a
// "weight" tied to the input embedding's), as nn.Module trees do. std::invalid_argument for a model without a
// module tree (TorchScript).
ModuleTree tree_of(const Model& model);

// The classes a model is never split inside (transformers' _no_split_modules): "LlamaDecoderLayer", ...
std::vector<std::string> no_split_classes(const Model& model);

// get_max_memory without a budget: the free memory of each CUDA device, then the CPU's available memory.
Budget available_memory();

// Plans a device map. options_json: {"device_map": "auto" | "balanced" | "balanced_low_0" | "sequential"
// (default "auto"), "max_memory": {"0": "10GiB", "cpu": "30GB", "disk": ...} (default: available_memory()),
// "no_split_module_classes": [...] (default: the model's own), "dtype": "float32" | "bfloat16" | "float16"
// (default: the parameters'), "offload_buffers": false, "fallback_allocation": false}. Returns the map as JSON
// ({"model.layers.0": 0, "lm_head": "cpu", ...}; accelerators as integers, as Accelerate writes them).
std::string plan_device_map(const Model& model, const char* options_json);

// compute_module_sizes as JSON ({"": total, "model": ..., ...}), in `dtype` ("" for the parameters' own).
std::string module_sizes_json(const Model& model, const std::string& dtype);

}  // namespace acc::core::bigmodel
