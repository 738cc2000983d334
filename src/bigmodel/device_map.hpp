// Accelerate's device-map planning (accelerate/utils/modeling.py): module sizes, the largest layer, balanced
// budgets and infer_auto_device_map, over a description of a module tree, so that the same code plans for a
// libacc model and for a tree recorded from PyTorch (the tests compare with Accelerate's own maps). Torch-free.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/module_tree.hpp"

namespace acc::core::bigmodel {

// A device of a budget or a map: "0", "1", ... for accelerators (Accelerate's integer keys), "cpu", "disk".
using Device = std::string;
bool is_accelerator(const Device& d);
// max_memory: device -> bytes, in Accelerate's order (accelerators by index, then cpu, then disk); sizes as
// strings are parsed as convert_file_size_to_int does. std::invalid_argument names an unknown device.
using Budget = std::vector<std::pair<Device, int64_t>>;
Budget ordered_budget(const std::vector<std::pair<Device, std::string>>& max_memory);

// compute_module_sizes: bytes per dotted name ("" the whole model; every module and tensor), converting floating
// tensors to `element_size` bytes when it is > 0 and smaller (Accelerate's dtype argument). In the order
// named_module_tensors meets them.
struct ModuleSizes {
  std::vector<std::string> order;
  std::map<std::string, int64_t> bytes;
  int64_t of(const std::string& name) const;  // 0 for a name without tensors (as Accelerate's defaultdict)
};
ModuleSizes compute_module_sizes(const ModuleTree& tree, int element_size = 0);

// get_balanced_memory: budgets that spread the model evenly over the accelerators (low_zero: as little as
// possible on the first).
Budget balanced_memory(const ModuleTree& tree, Budget max_memory, const std::vector<std::string>& no_split,
                       int element_size = 0, bool low_zero = false);

struct MapOptions {
  std::vector<std::string> no_split;  // no_split_module_classes
  int element_size = 0;               // dtype
  bool offload_buffers = false;
  bool fallback_allocation = false;
  bool clean_result = true;
};
// infer_auto_device_map: module or tensor name -> device, accelerators first, then the CPU, then the disk.
std::map<std::string, Device> infer_auto_device_map(const ModuleTree& tree, const Budget& max_memory,
                                                    const MapOptions& options);

// Accelerate's prepare_pippy(split_points="auto"): generate_device_map's budget for each of `num_chunks` devices (the
// model's size plus its largest layer, of `model_no_split` classes as calculate_maximum_sizes counts it, over
// num_chunks; written as convert_bytes writes it, its number rounded up and times 1.1, read as convert_file_size_to_int
// reads it), infer_auto_device_map with `no_split`, and the first module (in the model's order) each device from 1 on
// takes. std::invalid_argument where a device takes none.
std::vector<std::string> pippy_split_points(const ModuleTree& tree, int num_chunks,
                                            const std::vector<std::string>& no_split,
                                            const std::vector<std::string>& model_no_split);

}  // namespace acc::core::bigmodel
