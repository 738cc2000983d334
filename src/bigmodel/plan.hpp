// Device maps for libacc's models: Accelerate's device_map values ("auto", "balanced", "balanced_low_0",
// "sequential") planned with bigmodel/device_map.hpp over the model's module tree (models/module_tree.hpp) and its
// no_split_modules.
#pragma once
#include <string>

#include "bigmodel/device_map.hpp"
#include "models/model.hpp"
#include "models/module_tree.hpp"

namespace acc::core::bigmodel {

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
